// sglang-bootstrap: the same body to both legs plus bootstrap_host, bootstrap_port
// (the prefill worker's record params) and bootstrap_room, sent concurrently; the room
// is < 2^63 and, with prefill DP, room % dp_size == the prefill rank (SGLang mini_lb.py,
// data_parallel_controller.py; doc/pd.md §3).
#include "core/pd_planner.h"
#include "router/dispatch/pd/leg_bodies.h"
#include "router/dispatch/pd/protocol.h"

namespace infera::router {
namespace {

class SglangBootstrap final : public PdProtocol {
 public:
  bool concurrent() const override { return true; }
  nlohmann::json PrefillBody(nlohmann::json body, const PdLegInput& in) const override {
    return WithBootstrap(std::move(body), in);
  }
  absl::StatusOr<nlohmann::json> DecodeBody(nlohmann::json body, const PdLegInput& in,
                                            const nlohmann::json*) const override {
    return WithBootstrap(std::move(body), in);
  }

 private:
  static nlohmann::json WithBootstrap(nlohmann::json body, const PdLegInput& in) {
    const discovery::WorkerRecord& prefill = in.prefill.worker->record;
    const uint32_t dp_size = prefill.dp_size == 0 ? 1 : prefill.dp_size;
    const uint32_t rank = in.prefill.dp_rank.value_or(prefill.dp_rank) % dp_size;
    return pd::SglangLegBody(std::move(body), prefill.pd.bootstrap_host, prefill.pd.bootstrap_port,
                             core::AlignBootstrapRoom(in.random, rank, dp_size));
  }
};

}  // namespace

const PdProtocol& SglangBootstrapProtocol() {
  static const SglangBootstrap protocol;
  return protocol;
}

}  // namespace infera::router

namespace infera::pd {

using nlohmann::json;

// The leg bodies (leg_bodies.h).
json SglangLegBody(json body, std::string_view bootstrap_host, uint32_t bootstrap_port,
                   uint64_t bootstrap_room) {
  body["bootstrap_host"] = std::string(bootstrap_host);
  body["bootstrap_port"] = bootstrap_port;
  body["bootstrap_room"] = bootstrap_room;
  return body;
}

}  // namespace infera::pd
