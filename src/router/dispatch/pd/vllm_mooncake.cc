// vllm-mooncake (concurrent): the prefill leg as nixl's with a transfer_id; the decode
// leg gets {do_remote_prefill: true, remote_bootstrap_addr: "http://" + the prefill's
// bootstrap_addr, remote_engine_id, transfer_id} and max_tokens − 1 (vLLM
// mooncake_connector_proxy.py, Infera's max_tokens rule; doc/pd.md §3).
#include "router/dispatch/pd/leg_bodies.h"
#include "router/dispatch/pd/protocol.h"

namespace infera::router {
namespace {

class VllmMooncake final : public PdProtocol {
 public:
  bool concurrent() const override { return true; }
  nlohmann::json PrefillBody(nlohmann::json body, const PdLegInput& in) const override {
    return pd::MooncakePrefillBody(std::move(body), pd::MooncakeTransferId(in.request_id));
  }
  absl::StatusOr<nlohmann::json> DecodeBody(nlohmann::json body, const PdLegInput& in,
                                            const nlohmann::json*) const override {
    const discovery::PdParams& params = in.prefill.worker->record.pd;
    return pd::MooncakeDecodeBody(std::move(body), pd::MooncakeTransferId(in.request_id),
                                  params.bootstrap_addr, params.engine_id);
  }
};

}  // namespace

const PdProtocol& VllmMooncakeProtocol() {
  static const VllmMooncake protocol;
  return protocol;
}

}  // namespace infera::router
