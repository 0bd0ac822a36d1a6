#include "router/admin/admin_views.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace infera::router {

using nlohmann::json;

const char* BreakerName(const WorkerHealth& health) {
  static constexpr const char* kBreaker[] = {"closed", "open", "half_open"};
  return kBreaker[static_cast<int>(health.state())];
}

std::string AdminViews::HealthJson() const {
  // Infera's /health (infera/server/app.py): the process serves; how many workers a
  // request could go to. It evaluates the readiness latch too (Readiness::Check).
  return json({{"status", "ok"}, {"active_workers", readiness_.Check().routable_workers}}).dump();
}

std::pair<int, std::string> AdminViews::Ready() const {
  const Readiness::State s = readiness_.Check();
  const char* status = s.ready ? "ready" : !s.replay_done ? "starting" : "no_routable_workers";
  return {s.ready ? 200 : 503, json({{"status", status},
                                     {"routable_workers", s.routable_workers},
                                     {"workers", s.workers},
                                     {"startup_replay_done", s.replay_done}})
                                   .dump()};
}

std::string AdminViews::ModelsJson() const {
  json data = json::array();
  std::vector<std::string> seen;
  // A named snapshot: `*workers_.Snapshot()` in the range would free the fleet
  // under the loop when discovery publishes a new one (ASan: use-after-free).
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& w : *fleet) {
    const std::string& m = w->record.model_name;
    if (!m.empty() && std::find(seen.begin(), seen.end(), m) == seen.end()) {
      seen.push_back(m);
      data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "infera"}});
    }
    // LoRA adapters as vLLM lists them: with their base model as parent.
    for (const std::string& a : w->record.lora_adapters) {
      if (std::find(seen.begin(), seen.end(), a) != seen.end()) continue;
      seen.push_back(a);
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "infera"},
                      {"parent", m.empty() ? json(nullptr) : json(m)}});
    }
  }
  return json({{"object", "list"}, {"data", data}}).dump();
}

std::string AdminViews::WorkersJson() const {
  json list = json::array();
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& w : *fleet) {
    json j = discovery::WorkerRecordToJson(w->record);
    j["breaker_state"] = BreakerName(w->health);
    const WorkerLiveness::Snapshot checks = w->liveness.snapshot();
    j["health"] = checks.healthy ? "healthy" : "unhealthy";
    j["health_check"] = {{"checks", checks.checks},
                         {"consecutive_failures", checks.consecutive_failures},
                         {"consecutive_successes", checks.consecutive_successes},
                         {"last_error", checks.last_error}};
    j["routable"] = w->Routable(clock_.NowNs());
    j["render_parity"] = RenderParityName(w->render_parity.load(std::memory_order_relaxed));
    json ranks = json::array();
    const std::vector<size_t> active = planner_.ActiveBlocks(*w);
    const std::vector<std::pair<size_t, double>> remote = planner_.RemoteLoadOf(*w);
    const std::vector<core::PredictionStats> predictions = planner_.Predictions(*w);
    bool drifting = false;
    for (size_t r = 0; r < w->targets.size(); ++r) {
      const core::PredictionStats& p = predictions[r];
      drifting = drifting || p.drifting;
      ranks.push_back({{"dp_rank", w->record.dp_rank + r},
                       {"target", w->TargetName(r)},
                       {"active_blocks", active[r]},
                       {"remote_active_blocks", remote[r].first},
                       {"remote_pending_prefill_blocks", remote[r].second},
                       {"prediction",
                        {{"samples", p.samples},
                         {"predicted_tokens", p.predicted_tokens},
                         {"reported_tokens", p.reported_tokens},
                         {"abs_error_tokens", p.abs_error_tokens},
                         {"relative_error", p.relative_error},
                         {"drifting", p.drifting}}}});
    }
    j["targets"] = ranks;
    // Some rank's predicted cache hits persistently disagree with its engine.
    j["prediction_drifting"] = drifting;
    list.push_back(std::move(j));
  }
  return json({{"workers", list}}).dump();
}

std::optional<std::string> AdminViews::CacheViewJson(const std::string& worker_id,
                                                     std::optional<uint32_t> dp_rank) const {
  uint32_t dp_size = 1;
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& w : *fleet) {
    if (w->record.worker_id != worker_id) continue;
    dp_size = w->record.dp_size;
    if (!dp_rank) dp_rank = w->record.dp_rank;
  }
  const core::TargetKey key{worker_id, dp_rank.value_or(0)};
  auto id = events_.FindTarget(key);
  if (!id) return std::nullopt;
  size_t blocks = index_.WithIndex([&](const core::KvIndex& index) -> size_t {
    auto live = index.FindTarget(key);
    return live ? index.BlockCount(*live) : 0;
  });
  return json({{"worker_id", worker_id},
               {"dp_rank", key.dp_rank},
               {"target", core::TargetName(key, dp_size)},
               {"block_count", blocks}})
      .dump();
}

}  // namespace infera::router
