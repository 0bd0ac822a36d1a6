// vllm-nixl (serial): the prefill leg gets max_tokens 1, stream false, no
// stream_options / min_tokens and kv_transfer_params {do_remote_decode: true, ...};
// its answer's kv_transfer_params go verbatim into the decode leg (vLLM
// toy_proxy_server.py; doc/pd.md §3).
#include "absl/status/status.h"
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

namespace infera::pd {

using nlohmann::json;

// The leg bodies (leg_bodies.h).
// The prefill-only rewrite both vLLM connectors share.
json VllmPrefillOnly(json body, json kv_transfer_params) {
  body["kv_transfer_params"] = std::move(kv_transfer_params);
  body["stream"] = false;
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  for (const char* key : {"stream_options", "min_tokens", "min_completion_tokens"}) {
    body.erase(key);
  }
  return body;
}

json NixlPrefillBody(json body) {
  return VllmPrefillOnly(std::move(body), {{"do_remote_decode", true},
                                           {"do_remote_prefill", false},
                                           {"remote_engine_id", nullptr},
                                           {"remote_block_ids", nullptr},
                                           {"remote_host", nullptr},
                                           {"remote_port", nullptr}});
}

absl::StatusOr<json> NixlDecodeBody(json body, const json& prefill_response) {
  auto it = prefill_response.is_object() ? prefill_response.find("kv_transfer_params")
                                         : prefill_response.end();
  if (!prefill_response.is_object() || it == prefill_response.end() || !it->is_object() ||
      it->empty()) {
    return absl::FailedPreconditionError(
        "the prefill worker's answer carries no kv_transfer_params");
  }
  body["kv_transfer_params"] = *it;
  return body;
}

}  // namespace infera::pd
