// AdminViews' /metrics text (admin_views.h).
#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "router/admin/admin_views.h"

namespace infera::router {

using nlohmann::json;

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

void AdminViews::RenderFleetSize(std::string& out, const Fleet& fleet) const {
  size_t by_mode[3] = {0, 0, 0};
  for (const auto& w : fleet) by_mode[static_cast<int>(w->record.disagg_mode) % 3]++;
  RenderHeader(out, "infera_active_workers", "gauge", "Workers known to discovery.");
  for (int m = 0; m < 3; ++m) {
    out += "infera_active_workers{" + MetricLabel("disagg_mode", core::RoleName(core::Role(m))) +
           "} " + std::to_string(by_mode[m]) + "\n";
  }
  // Infera's Rust router's name for the total (rust/router/src/metrics.rs).
  RenderHeader(out, "infera_router_active_workers", "gauge", "Workers known to discovery.");
  out += "infera_router_active_workers " + std::to_string(fleet.size()) + "\n";
  RenderHeader(out, "infera_policy_active_blocks", "gauge",
               "Distinct in-flight prompt blocks per target.");
  for (const auto& w : fleet) {
    const std::vector<size_t> active = planner_.ActiveBlocks(*w);
    for (size_t r = 0; r < w->targets.size(); ++r) {
      out += "infera_policy_active_blocks{" + MetricLabel("worker_id", w->TargetName(r)) + "} " +
             std::to_string(active[r]) + "\n";
    }
  }
}

// --router-replica-sync: its own families and the other replicas' load per target.
void AdminViews::RenderRemoteLoad(std::string& out, const Fleet& fleet) const {
  replica_->RenderMetrics(out);
  std::vector<std::pair<std::string, std::pair<size_t, double>>> rows;
  for (const auto& w : fleet) {
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

void AdminViews::RenderCacheViews(std::string& out, const Fleet& fleet) const {
  RenderHeader(out, "infera_policy_cache_view_size", "gauge",
               "Blocks the router believes each target caches.");
  size_t table_bytes = 0;
  index_.WithIndex([&](const core::KvIndex& index) {
    for (const auto& w : fleet) {
      for (size_t r = 0; r < w->targets.size(); ++r) {
        const core::TargetKey key = w->KeyOf(r);
        auto id = index.FindTarget(key);
        out += "infera_policy_cache_view_size{" + MetricLabel("worker_id", w->TargetName(r)) +
               "} " + std::to_string(id ? index.BlockCount(*id) : 0) + "\n";
      }
    }
    table_bytes = index.TableBytes();
    return 0;
  });
  RenderHeader(out, "infera_kv_index_table_bytes", "gauge",
               "Bytes of the KV index's tables (rows, engine maps, holder sets).");
  out += "infera_kv_index_table_bytes " + std::to_string(table_bytes) + "\n";
  RenderIndexBound(out, fleet);
}

void AdminViews::RenderWorkerHealth(std::string& out, const Fleet& fleet) const {
  RenderHeader(out, "infera_router_worker_breaker_state", "gauge",
               "Circuit breaker per worker: 0 closed, 1 open, 2 half-open.");
  for (const auto& w : fleet) {
    out += "infera_router_worker_breaker_state{" + MetricLabel("worker_id", w->record.worker_id) +
           "} " + std::to_string(static_cast<int>(w->health.state())) + "\n";
  }
  RenderHeader(out, "infera_router_worker_healthy", "gauge",
               "1 while the worker passes its active health checks, 0 while it is out of "
               "picks for failing them.");
  for (const auto& w : fleet) {
    out += "infera_router_worker_healthy{" + MetricLabel("worker_id", w->record.worker_id) + "} " +
           (w->liveness.healthy() ? "1" : "0") + "\n";
  }
  RenderHeader(out, "infera_router_worker_breaker_trips_total", "counter",
               "Times the worker's circuit breaker opened.");
  for (const auto& w : fleet) {
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
  for (const auto& w : fleet) {
    const bool exact = CountsAsExact(w->render_parity.load(std::memory_order_relaxed));
    out += "infera_router_render_parity{" + MetricLabel("worker_id", w->record.worker_id) + "} " +
           (exact ? "1" : "0") + "\n";
  }
}

void AdminViews::RenderEventCounters(std::string& out) const {
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
}

std::string AdminViews::MetricsText() const {
  std::string out;
  metrics_.Render(out);
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  RenderFleetSize(out, *fleet);
  for (const auto& render : more_metrics_) render(out);
  if (replica_ != nullptr) RenderRemoteLoad(out, *fleet);
  RenderCacheViews(out, *fleet);
  RenderWorkerHealth(out, *fleet);
  RenderPredictions(out, *fleet);
  RenderHeader(out, "infera_router_pending_pick_guards", "gauge",
               "Picks whose active blocks are not yet released.");
  out += "infera_router_pending_pick_guards " + std::to_string(planner_.PendingGuards()) + "\n";
  RenderDemand(out, *fleet);
  RenderEventCounters(out);
  return out;
}

}  // namespace infera::router
