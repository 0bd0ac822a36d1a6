#include "router/admin/admin_views.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace infera::router {

using nlohmann::json;

namespace {

const char* BreakerName(const WorkerHealth& health) {
  static constexpr const char* kBreaker[] = {"closed", "open", "half_open"};
  return kBreaker[static_cast<int>(health.state())];
}

}  // namespace

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

void AdminViews::RenderPredictions(std::string& out, const Fleet& fleet) const {
  std::vector<std::pair<std::string, core::PredictionStats>> rows;
  for (const auto& w : fleet) {
    const std::vector<core::PredictionStats> predictions = planner_.Predictions(*w);
    for (size_t r = 0; r < w->targets.size(); ++r) {
      rows.emplace_back(MetricLabel("worker_id", w->TargetName(r)), predictions[r]);
    }
  }
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    RenderHeader(out, name, type, help);
    for (const auto& [label, p] : rows) {
      out += std::string(name) + "{" + label + "} " + value(p) + "\n";
    }
  };
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto d = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return std::string(buf);
  };
  family("infera_router_prediction_samples_total", "counter",
         "Answers whose reported cached tokens were compared with the pick's prediction.",
         [&](const core::PredictionStats& p) { return u(p.samples); });
  family("infera_router_prediction_predicted_tokens_total", "counter",
         "Cached prompt tokens the router's view predicted, over the compared answers.",
         [&](const core::PredictionStats& p) { return u(p.predicted_tokens); });
  family("infera_router_prediction_reported_tokens_total", "counter",
         "Cached prompt tokens the engine reported, over the compared answers.",
         [&](const core::PredictionStats& p) { return u(p.reported_tokens); });
  family("infera_router_prediction_error_tokens", "gauge",
         "Moving mean of |predicted - reported| cached tokens per answer.",
         [&](const core::PredictionStats& p) { return d(p.abs_error_tokens); });
  family("infera_router_prediction_relative_error", "gauge",
         "Moving mean of |predicted - reported| / max(predicted, reported), in [0, 1].",
         [&](const core::PredictionStats& p) { return d(p.relative_error); });
  family("infera_router_prediction_drifting", "gauge",
         "1 while the target's predictions persistently disagree with its engine.",
         [&](const core::PredictionStats& p) { return u(p.drifting ? 1 : 0); });
}

void AdminViews::RenderIndexBound(std::string& out, const Fleet& fleet) const {
  std::string bound, evicted;
  index_.WithIndex([&](const core::KvIndex& index) {
    for (const auto& w : fleet) {
      for (size_t r = 0; r < w->targets.size(); ++r) {
        const auto id = index.FindTarget(w->KeyOf(r));
        // The target's name, as every other per-target series labels it (<id>#dp<r>).
        const std::string label = "{" + MetricLabel("worker_id", w->TargetName(r)) + "} ";
        bound += "infera_router_index_max_blocks" + label +
                 std::to_string(id ? index.MaxBlocks(*id) : 0) + "\n";
        evicted += "infera_router_index_blocks_evicted_total" + label +
                   std::to_string(id ? index.EvictedBlocks(*id) : 0) + "\n";
      }
    }
    return 0;
  });
  RenderHeader(out, "infera_router_index_max_blocks", "gauge",
               "Bound of each target's cache view in blocks (--max-index-blocks; 0: none).");
  out += bound;
  RenderHeader(out, "infera_router_index_blocks_evicted_total", "counter",
               "Blocks the bound evicted from each target's cache view (oldest first).");
  out += evicted;
}

void AdminViews::RenderDemand(std::string& out, const Fleet& fleet) const {
  const bool on = planner_.demand_mode() != core::DemandMode::kOff;
  std::string tokens, requests;
  for (const auto& w : fleet) {
    if (!on || w->record.disagg_mode != discovery::DisaggMode::kDecode) continue;
    const std::vector<std::pair<uint64_t, uint64_t>> demand = planner_.Demand(*w);
    for (size_t r = 0; r < w->targets.size(); ++r) {
      const std::string label = "{" + MetricLabel("target", w->TargetName(r)) + "} ";
      tokens +=
          "infera_router_decode_demand_tokens" + label + std::to_string(demand[r].first) + "\n";
      requests +=
          "infera_router_decode_demand_requests" + label + std::to_string(demand[r].second) + "\n";
    }
  }
  RenderHeader(out, "infera_router_decode_demand_tokens", "gauge",
               "In-flight input tokens reserved per decode route key (decode input demand).");
  out += tokens;
  RenderHeader(out, "infera_router_decode_demand_requests", "gauge",
               "Requests holding a decode input-demand reservation per decode route key.");
  out += requests;
  RenderHeader(out, "infera_router_decode_demand_pending_reservations", "gauge",
               "Decode input-demand reservations not yet released, including those of "
               "workers that left discovery.");
  out += "infera_router_decode_demand_pending_reservations " +
         std::to_string(planner_.PendingDemandReservations()) + "\n";
}

std::string AdminViews::MetricsText() const {
  std::string out;
  metrics_.Render(out);
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  size_t by_mode[3] = {0, 0, 0};
  for (const auto& w : *fleet) by_mode[static_cast<int>(w->record.disagg_mode) % 3]++;
  RenderHeader(out, "infera_active_workers", "gauge", "Workers known to discovery.");
  for (int m = 0; m < 3; ++m) {
    out += "infera_active_workers{" + MetricLabel("disagg_mode", core::RoleName(core::Role(m))) +
           "} " + std::to_string(by_mode[m]) + "\n";
  }
  // Infera's Rust router's name for the total (rust/router/src/metrics.rs).
  RenderHeader(out, "infera_router_active_workers", "gauge", "Workers known to discovery.");
  out += "infera_router_active_workers " + std::to_string(fleet->size()) + "\n";
  RenderHeader(out, "infera_policy_active_blocks", "gauge",
               "Distinct in-flight prompt blocks per target.");
  for (const auto& w : *fleet) {
    const std::vector<size_t> active = planner_.ActiveBlocks(*w);
    for (size_t r = 0; r < w->targets.size(); ++r) {
      out += "infera_policy_active_blocks{" + MetricLabel("worker_id", w->TargetName(r)) + "} " +
             std::to_string(active[r]) + "\n";
    }
  }
  for (const auto& render : more_metrics_) render(out);
  if (replica_ != nullptr) {
    replica_->RenderMetrics(out);
    std::vector<std::pair<std::string, std::pair<size_t, double>>> rows;
    for (const auto& w : *fleet) {
      const std::vector<std::pair<size_t, double>> remote = planner_.RemoteLoadOf(*w);
      for (size_t r = 0; r < w->targets.size(); ++r) {
        rows.emplace_back(MetricLabel("worker_id", w->TargetName(r)), remote[r]);
      }
    }
    RenderHeader(out, "infera_policy_remote_active_blocks", "gauge",
                 "In-flight prompt blocks other router replicas hold per target.");
    for (const auto& [label, l] : rows) {
      out += "infera_policy_remote_active_blocks{" + label + "} " + std::to_string(l.first) + "\n";
    }
    RenderHeader(out, "infera_policy_remote_pending_prefill_blocks", "gauge",
                 "Prefill blocks other router replicas still have pending per target.");
    for (const auto& [label, l] : rows) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.6g", l.second);
      out += "infera_policy_remote_pending_prefill_blocks{" + label + "} " + buf + "\n";
    }
  }
  RenderHeader(out, "infera_policy_cache_view_size", "gauge",
               "Blocks the router believes each target caches.");
  index_.WithIndex([&](const core::KvIndex& index) {
    for (const auto& w : *fleet) {
      for (size_t r = 0; r < w->targets.size(); ++r) {
        const core::TargetKey key = w->KeyOf(r);
        auto id = index.FindTarget(key);
        out += "infera_policy_cache_view_size{" + MetricLabel("worker_id", w->TargetName(r)) +
               "} " + std::to_string(id ? index.BlockCount(*id) : 0) + "\n";
      }
    }
    return 0;
  });
  RenderIndexBound(out, *fleet);
  RenderHeader(out, "infera_router_worker_breaker_state", "gauge",
               "Circuit breaker per worker: 0 closed, 1 open, 2 half-open.");
  for (const auto& w : *fleet) {
    out += "infera_router_worker_breaker_state{" + MetricLabel("worker_id", w->record.worker_id) +
           "} " + std::to_string(static_cast<int>(w->health.state())) + "\n";
  }
  RenderHeader(out, "infera_router_worker_healthy", "gauge",
               "1 while the worker passes its active health checks, 0 while it is out of "
               "picks for failing them.");
  for (const auto& w : *fleet) {
    out += "infera_router_worker_healthy{" + MetricLabel("worker_id", w->record.worker_id) + "} " +
           (w->liveness.healthy() ? "1" : "0") + "\n";
  }
  RenderHeader(out, "infera_router_worker_breaker_trips_total", "counter",
               "Times the worker's circuit breaker opened.");
  for (const auto& w : *fleet) {
    out += "infera_router_worker_breaker_trips_total{" +
           MetricLabel("worker_id", w->record.worker_id) + "} " +
           std::to_string(w->health.trips()) + "\n";
  }
  const Readiness::State ready = readiness_.Check();
  RenderHeader(out, "infera_router_routable_workers", "gauge",
               "Workers a request could go to now (known, healthy, breaker admitting).");
  out += "infera_router_routable_workers " + std::to_string(ready.routable_workers) + "\n";
  RenderHeader(out, "infera_router_ready", "gauge", "1 while /ready answers 200.");
  out += std::string("infera_router_ready ") + (ready.ready ? "1" : "0") + "\n";
  RenderHeader(out, "infera_router_render_parity", "gauge",
               "1 while the worker counts as rendering like the router (exact, unsupported or "
               "not checked), 0 while its render parity diverged.");
  for (const auto& w : *fleet) {
    const bool exact = CountsAsExact(w->render_parity.load(std::memory_order_relaxed));
    out += "infera_router_render_parity{" + MetricLabel("worker_id", w->record.worker_id) + "} " +
           (exact ? "1" : "0") + "\n";
  }
  RenderPredictions(out, *fleet);
  RenderHeader(out, "infera_router_pending_pick_guards", "gauge",
               "Picks whose active blocks are not yet released.");
  out += "infera_router_pending_pick_guards " + std::to_string(planner_.PendingGuards()) + "\n";
  RenderDemand(out, *fleet);

  const events::KvEventCounters& c = events_.counters();
  auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& v) {
    RenderHeader(out, name, "counter", help);
    out += std::string(name) + " " + std::to_string(v.load()) + "\n";
  };
  counter("infera_kv_events_messages_total", "Live KV-event messages received.", c.messages);
  counter("infera_kv_events_batches_total", "KV-event batches applied.", c.batches);
  counter("infera_kv_events_events_total", "KV events applied.", c.events);
  counter("infera_kv_events_blocks_stored_total", "Engine blocks stored.", c.blocks_stored);
  counter("infera_kv_events_blocks_removed_total", "Blocks removed.", c.blocks_removed);
  counter("infera_kv_events_gaps_total", "Sequence gaps seen.", c.gaps);
  counter("infera_kv_events_replays_total", "Replay requests sent.", c.replays);
  counter("infera_kv_events_replay_failures_total", "Replays that timed out or were malformed.",
          c.replay_failures);
  counter("infera_kv_events_replays_skipped_total",
          "Gaps not replayed because the target's replay backs off.", c.replays_skipped);
  counter("infera_kv_events_resyncs_total", "Target views cleared and rebuilt.", c.resyncs);
  counter("infera_kv_events_restarts_total", "Publisher restarts detected.", c.restarts);
  counter("infera_kv_events_decode_errors_total", "Undecodable payloads.", c.decode_errors);
  counter("infera_kv_events_unknown_parents_total", "BlockStored with unknown parent.",
          c.unknown_parents);
  counter("infera_kv_events_evicted_parents_total",
          "BlockStored skipped: the parent may be a block the view's bound evicted.",
          c.evicted_parents);
  if (const ApproxCounters* a = planner_.approx_counters()) {
    counter("infera_router_approx_blocks_recorded_total",
            "Approximate mode: blocks the router's picks predicted cached.", a->recorded);
    counter("infera_router_approx_blocks_expired_total",
            "Approximate mode: predictions dropped at --approx-ttl-s.", a->expired);
    counter("infera_router_approx_blocks_evicted_total",
            "Approximate mode: predictions dropped by --approx-max-blocks.", a->evicted);
  }
  return out;
}

std::string AdminViews::FleetJson() const {
  const int64_t now_ns = clock_.NowNs();
  const FleetHistory& history = metrics_.history();
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  const bool demand_on = planner_.demand_mode() != core::DemandMode::kOff;
  json targets = json::array();
  size_t cached_total = 0, active_total = 0, requests_total = 0;
  double pending_total = 0;
  auto rate = [](uint64_t hits, uint64_t blocks) {
    return blocks == 0 ? json(nullptr) : json(static_cast<double>(hits) / blocks);
  };
  for (const auto& w : *fleet) {
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
          {"hit_rate_1m", rate(window.hit_blocks, window.request_blocks)},
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
      cached_total += cached[r][0];
      active_total += load[r].active_blocks;
      pending_total += load[r].pending_prefill_blocks;
      requests_total += load[r].requests;
      targets.push_back(std::move(t));
    }
  }

  // Per-second series, oldest first; the windows of the totals end at the current second.
  const std::vector<FleetHistory::Second> seconds = history.Seconds(now_ns);
  json t_s = json::array(), picks = json::array(), hit_rate = json::array(),
       ttft_ms = json::array(), ttft_max_ms = json::array(), inflight = json::array(),
       ended = json::array();
  uint64_t hits_1m = 0, blocks_1m = 0, picks_10s = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const FleetHistory::Second& s = seconds[i];
    t_s.push_back(s.second);
    picks.push_back(s.picks);
    hit_rate.push_back(rate(s.hit_blocks, s.request_blocks));
    ttft_ms.push_back(s.ttft_count == 0 ? json(nullptr) : json(1e3 * s.ttft_sum_s / s.ttft_count));
    ttft_max_ms.push_back(s.ttft_count == 0 ? json(nullptr) : json(1e3 * s.ttft_max_s));
    inflight.push_back(s.max_inflight);
    ended.push_back(s.ended);
    const size_t age = seconds.size() - 1 - i;
    if (age < FleetHistory::kTargetSeconds) {
      hits_1m += s.hit_blocks;
      blocks_1m += s.request_blocks;
    }
    if (age < 10) picks_10s += s.picks;
  }

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
  const Readiness::State ready = readiness_.Check();
  json totals = {{"workers", fleet->size()},
                 {"targets", targets.size()},
                 {"routable_workers", ready.routable_workers},
                 {"ready", ready.ready},
                 {"cached_blocks", cached_total},
                 {"active_blocks", active_total},
                 {"pending_prefill_blocks", pending_total},
                 {"inflight_requests", requests_total},
                 {"router_inflight_requests", seconds.back().last_inflight},
                 {"picks_per_s", picks_10s / 10.0},
                 {"hit_rate_1m", rate(hits_1m, blocks_1m)},
                 {"pending_pick_guards", planner_.PendingGuards()}};
  json events = {{"messages", c.messages.load()},
                 {"batches", c.batches.load()},
                 {"gaps", c.gaps.load()},
                 {"replays", c.replays.load()},
                 {"replay_failures", c.replay_failures.load()},
                 {"resyncs", c.resyncs.load()},
                 {"restarts", c.restarts.load()},
                 {"decode_errors", c.decode_errors.load()},
                 {"idle_s", idle_s}};
  return json({{"now_ms", now_ns / 1'000'000},
               {"totals", std::move(totals)},
               {"events", std::move(events)},
               {"targets", std::move(targets)},
               {"history",
                {{"t_s", std::move(t_s)},
                 {"picks", std::move(picks)},
                 {"hit_rate", std::move(hit_rate)},
                 {"ttft_ms", std::move(ttft_ms)},
                 {"ttft_max_ms", std::move(ttft_max_ms)},
                 {"inflight", std::move(inflight)},
                 {"ended", std::move(ended)}}},
               {"last_picks", std::move(last)}})
      .dump();
}

}  // namespace infera::router
