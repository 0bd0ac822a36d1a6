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

namespace infera::pd {

using nlohmann::json;

// The leg bodies (leg_bodies.h).
namespace {

void DecrementAtLeastOne(json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_number_integer()) return;
  const int64_t v = it->get<int64_t>();
  if (v > 1) *it = v - 1;
}

}  // namespace

std::string MooncakeTransferId(std::string_view request_id) {
  return "xfer-" + std::string(request_id);
}

json MooncakePrefillBody(json body, std::string_view transfer_id) {
  return VllmPrefillOnly(std::move(body), {{"do_remote_decode", true},
                                           {"do_remote_prefill", false},
                                           {"transfer_id", std::string(transfer_id)}});
}

json MooncakeDecodeBody(json body, std::string_view transfer_id, std::string_view bootstrap_addr,
                        std::string_view engine_id) {
  body["kv_transfer_params"] = {{"do_remote_decode", false},
                                {"do_remote_prefill", true},
                                {"remote_bootstrap_addr", "http://" + std::string(bootstrap_addr)},
                                {"remote_engine_id", std::string(engine_id)},
                                {"transfer_id", std::string(transfer_id)}};
  DecrementAtLeastOne(body, "max_tokens");
  DecrementAtLeastOne(body, "max_completion_tokens");
  return body;
}

}  // namespace infera::pd
