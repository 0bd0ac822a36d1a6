// AdminViews' /v1/admin/fleet, the dashboard's feed (admin_views.h).
#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "router/admin/admin_views.h"

namespace infera::router {
namespace {

using nlohmann::json;

// hits / blocks, or null for no blocks.
json HitRate(uint64_t hits, uint64_t blocks) {
  return blocks == 0 ? json(nullptr) : json(static_cast<double>(hits) / blocks);
}

// The fleet's per-second series, oldest first, and the totals of their last minute
// (hit rate) and last ten seconds (picks).
struct FleetSeries {
  json history;
  uint64_t hits_1m = 0, blocks_1m = 0, picks_10s = 0;
};

FleetSeries SeriesJson(const std::vector<FleetHistory::Second>& seconds) {
  FleetSeries out;
  json t_s = json::array(), picks = json::array(), hit_rate = json::array(),
       ttft_ms = json::array(), ttft_max_ms = json::array(), inflight = json::array(),
       ended = json::array();
  for (size_t i = 0; i < seconds.size(); ++i) {
    const FleetHistory::Second& s = seconds[i];
    t_s.push_back(s.second);
    picks.push_back(s.picks);
    hit_rate.push_back(HitRate(s.hit_blocks, s.request_blocks));
    ttft_ms.push_back(s.ttft_count == 0 ? json(nullptr) : json(1e3 * s.ttft_sum_s / s.ttft_count));
    ttft_max_ms.push_back(s.ttft_count == 0 ? json(nullptr) : json(1e3 * s.ttft_max_s));
    inflight.push_back(s.max_inflight);
    ended.push_back(s.ended);
    const size_t age = seconds.size() - 1 - i;
    if (age < FleetHistory::kTargetSeconds) {
      out.hits_1m += s.hit_blocks;
      out.blocks_1m += s.request_blocks;
    }
    if (age < 10) out.picks_10s += s.picks;
  }
  out.history = {{"t_s", std::move(t_s)},
                 {"picks", std::move(picks)},
                 {"hit_rate", std::move(hit_rate)},
                 {"ttft_ms", std::move(ttft_ms)},
                 {"ttft_max_ms", std::move(ttft_max_ms)},
                 {"inflight", std::move(inflight)},
                 {"ended", std::move(ended)}};
  return out;
}

// The last picks with their legs' receipts.
json LastPicksJson(const FleetHistory& history) {
  json last = json::array();
  for (const RouteReceipt& r : history.LastPicks()) {
    json legs = json::array();
    for (const RouteLegReceipt& l : r.legs) {
      legs.push_back(
          {{"role", core::RoleName(l.role)},
           {"target", l.target},
           {"cache_hits", l.cache_hits},
           {"request_blocks", l.request_blocks},
           {"cost", l.cost},
           {"w_overlap", l.w_overlap},
           {"credited", l.credited},
           {"load", l.load},
           {"candidates", l.candidates},
           {"runner_up_cost", l.runner_up_cost ? json(*l.runner_up_cost) : json(nullptr)}});
    }
    last.push_back({{"at_ms", r.at_ns / 1'000'000},
                    {"request_id", r.request_id},
                    {"policy", core::PolicyName(r.policy)},
                    {"legs", std::move(legs)},
                    {"header", FormatRouteReceipt(r)}});
  }
  return last;
}

}  // namespace

AdminViews::FleetTargets AdminViews::TargetsJson(const Fleet& fleet, int64_t now_ns) const {
  const FleetHistory& history = metrics_.history();
  const bool demand_on = planner_.demand_mode() != core::DemandMode::kOff;
  FleetTargets out;
  out.targets = json::array();
  for (const auto& w : fleet) {
    // Per rank: all tiers, then device, host, disk.
    std::vector<std::array<size_t, 4>> cached(w->targets.size(), {0, 0, 0, 0});
    index_.WithIndex([&](const core::KvIndex& index) {
      for (size_t r = 0; r < w->targets.size(); ++r) {
        const auto id = index.FindTarget(w->KeyOf(r));
        if (!id) continue;
        cached[r][0] = index.BlockCount(*id);
        for (int tier = 0; tier < core::kTierCount; ++tier) {
          cached[r][tier + 1] = index.TierBlockCount(*id, static_cast<core::Tier>(tier));
        }
      }
      return 0;
    });
    const std::vector<PickPlanner::TargetLoad> load = planner_.LoadOf(*w);
    const std::vector<core::PredictionStats> predictions = planner_.Predictions(*w);
    std::vector<std::pair<uint64_t, uint64_t>> demand;
    if (demand_on && w->record.disagg_mode == discovery::DisaggMode::kDecode) {
      demand = planner_.Demand(*w);
    }
    const WorkerLiveness::Snapshot checks = w->liveness.snapshot();
    for (size_t r = 0; r < w->targets.size(); ++r) {
      const std::string name = w->TargetName(r);
      const FleetHistory::TargetWindow window = history.Target(name, now_ns);
      json t = {
          {"target", name},
          {"worker_id", w->record.worker_id},
          {"dp_rank", w->record.dp_rank + r},
          {"role",
           core::RoleName(static_cast<core::Role>(static_cast<uint8_t>(w->record.disagg_mode)))},
          {"model", w->record.model_name},
          {"cached_blocks", cached[r][0]},
          {"cached_blocks_by_tier",
           {{"device", cached[r][1]}, {"host", cached[r][2]}, {"disk", cached[r][3]}}},
          {"hit_rate_1m", HitRate(window.hit_blocks, window.request_blocks)},
          {"hit_blocks_1m", window.hit_blocks},
          {"request_blocks_1m", window.request_blocks},
          {"picks_1m", window.picks},
          {"picks_per_s", window.picks_10s / 10.0},
          {"active_blocks", load[r].active_blocks},
          {"pending_prefill_blocks", load[r].pending_prefill_blocks},
          {"inflight_requests", load[r].requests},
          {"prefilling_requests", load[r].prefilling_requests},
          {"breaker", BreakerName(w->health)},
          {"health", checks.healthy ? "healthy" : "unhealthy"},
          {"routable", w->Routable(now_ns)},
          {"render_parity", RenderParityName(w->render_parity.load(std::memory_order_relaxed))},
          {"prediction_drifting", predictions[r].drifting},
          {"decode_demand_tokens", demand.empty() ? json(nullptr) : json(demand[r].first)},
          {"decode_demand_requests", demand.empty() ? json(nullptr) : json(demand[r].second)}};
      out.cached_blocks += cached[r][0];
      out.active_blocks += load[r].active_blocks;
      out.pending_prefill_blocks += load[r].pending_prefill_blocks;
      out.inflight_requests += load[r].requests;
      out.targets.push_back(std::move(t));
    }
  }
  return out;
}

nlohmann::json AdminViews::EventsJson(int64_t now_ns) const {
  const events::KvEventCounters& c = events_.counters();
  double idle_s = 0;
  {
    absl::MutexLock lock(&events_seen_mu_);
    const uint64_t messages = c.messages.load();
    if (events_moved_ns_ < 0 || messages != events_seen_) {
      events_seen_ = messages;
      events_moved_ns_ = now_ns;
    }
    idle_s = (now_ns - events_moved_ns_) * 1e-9;
  }
  return {{"messages", c.messages.load()},
          {"batches", c.batches.load()},
          {"gaps", c.gaps.load()},
          {"replays", c.replays.load()},
          {"replay_failures", c.replay_failures.load()},
          {"resyncs", c.resyncs.load()},
          {"restarts", c.restarts.load()},
          {"decode_errors", c.decode_errors.load()},
          {"idle_s", idle_s}};
}

std::string AdminViews::FleetJson() const {
  const int64_t now_ns = clock_.NowNs();
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  FleetTargets t = TargetsJson(*fleet, now_ns);
  // The windows of the totals end at the current second.
  const std::vector<FleetHistory::Second> seconds = metrics_.history().Seconds(now_ns);
  FleetSeries series = SeriesJson(seconds);
  const Readiness::State ready = readiness_.Check();
  json totals = {{"workers", fleet->size()},
                 {"targets", t.targets.size()},
                 {"routable_workers", ready.routable_workers},
                 {"ready", ready.ready},
                 {"cached_blocks", t.cached_blocks},
                 {"active_blocks", t.active_blocks},
                 {"pending_prefill_blocks", t.pending_prefill_blocks},
                 {"inflight_requests", t.inflight_requests},
                 {"router_inflight_requests", seconds.back().last_inflight},
                 {"picks_per_s", series.picks_10s / 10.0},
                 {"hit_rate_1m", HitRate(series.hits_1m, series.blocks_1m)},
                 {"pending_pick_guards", planner_.PendingGuards()}};
  return json({{"now_ms", now_ns / 1'000'000},
               {"totals", std::move(totals)},
               {"events", EventsJson(now_ns)},
               {"targets", std::move(t.targets)},
               {"history", std::move(series.history)},
               {"last_picks", LastPicksJson(metrics_.history())}})
      .dump();
}

}  // namespace infera::router
