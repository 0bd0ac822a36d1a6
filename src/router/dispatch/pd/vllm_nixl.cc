// vllm-nixl (serial): the prefill leg gets max_tokens 1, stream false, no
// stream_options / min_tokens and kv_transfer_params {do_remote_decode: true, ...};
// its answer's kv_transfer_params go verbatim into the decode leg (vLLM
// toy_proxy_server.py; doc/pd.md §3).
#include "router/dispatch/pd/leg_bodies.h"
#include "router/dispatch/pd/protocol.h"

namespace infera::router {
namespace {

class VllmNixl final : public PdProtocol {
 public:
  bool concurrent() const override { return false; }
  nlohmann::json PrefillBody(nlohmann::json body, const PdLegInput&) const override {
    return pd::NixlPrefillBody(std::move(body));
  }
  absl::StatusOr<nlohmann::json> DecodeBody(nlohmann::json body, const PdLegInput&,
                                            const nlohmann::json* prefill_answer) const override {
    if (prefill_answer == nullptr) {
      return absl::FailedPreconditionError("vllm-nixl decode needs the prefill answer");
    }
    return pd::NixlDecodeBody(std::move(body), *prefill_answer);
  }
};

}  // namespace

const PdProtocol& VllmNixlProtocol() {
  static const VllmNixl protocol;
  return protocol;
}

}  // namespace infera::router
