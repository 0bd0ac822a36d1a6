#include "router/metrics/router_metrics.h"

#include <vector>

namespace infera::router {
namespace {

// `endpoint="...",status="..."`, cached for the statuses the router answers with.
const std::string& RequestLabels(ApiKind kind, int status) {
  static constexpr int kStatuses[] = {200, 400, 404, 405, 413, 499, 500, 502, 503, 504, 508};
  static const auto* table = [] {
    auto* t = new std::vector<std::string>;
    for (ApiKind k : {ApiKind::kChat, ApiKind::kCompletions, ApiKind::kMessages}) {
      for (int st : kStatuses) {
        t->push_back(MetricLabel("endpoint", ApiKindName(k)) + "," +
                     MetricLabel("status", std::to_string(st)));
      }
    }
    return t;
  }();
  constexpr size_t kCount = std::size(kStatuses);
  for (size_t i = 0; i < kCount; ++i) {
    if (kStatuses[i] == status) return (*table)[static_cast<size_t>(kind) * kCount + i];
  }
  thread_local std::string other;
  other = MetricLabel("endpoint", ApiKindName(kind)) + "," +
          MetricLabel("status", std::to_string(status));
  return other;
}

}  // namespace

const std::string& RoleLabel(core::Role role) {
  static const std::string labels[3] = {MetricLabel("role", core::RoleName(core::Role(0))),
                                        MetricLabel("role", core::RoleName(core::Role(1))),
                                        MetricLabel("role", core::RoleName(core::Role(2)))};
  return labels[static_cast<size_t>(role) % 3];
}

RouterMetrics::RouterMetrics(core::Policy policy)
    : policy_label_(MetricLabel("router", core::PolicyName(policy))) {
  for (size_t i = 0; i < kOutcomeCount; ++i) {
    duration_by_outcome_[i] = request_duration_.Series(
        policy_label_ + "," + MetricLabel("outcome", OutcomeName(static_cast<Outcome>(i))));
  }
  stage_parse_ = overhead_.Series(MetricLabel("stage", "parse"));
  stage_render_tokenize_ = overhead_.Series(MetricLabel("stage", "render_tokenize"));
  stage_hash_match_ = overhead_.Series(MetricLabel("stage", "hash_match"));
  stage_total_ = overhead_.Series(MetricLabel("stage", "total"));
  for (int role = 0; role < 3; ++role) {
    pick_cache_hits_by_role_[role] = pick_cache_hits_.Series(RoleLabel(core::Role(role)));
    pick_request_blocks_by_role_[role] = pick_request_blocks_.Series(RoleLabel(core::Role(role)));
  }
  loops_detected_total_.Series("");  // shown (as 0) before the first loop
  for (size_t i = 0; i < demand_decisions_.size(); ++i) {
    demand_decisions_[i] =
        demand_decisions_total_.Series(MetricLabel("mode", i < 4 ? "shadow" : "on") + "," +
                                       MetricLabel("input", (i & 2) ? "estimated" : "exact") + "," +
                                       MetricLabel("agrees", (i & 1) ? "true" : "false"));
  }
}

void RouterMetrics::RequestEnded(ApiKind kind, int status, Outcome outcome, double seconds) {
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  requests_total_.Add(RequestLabels(kind, status));
  duration_by_outcome_[static_cast<size_t>(outcome) % kOutcomeCount]->Observe(seconds);
  requests_by_outcome_[static_cast<size_t>(outcome) % kOutcomeCount].fetch_add(
      1, std::memory_order_relaxed);
}

void RouterMetrics::ObserveStages(double parse_s, double tokenize_s, double hash_match_s,
                                  double total_s) {
  stage_parse_->Observe(parse_s);
  stage_render_tokenize_->Observe(tokenize_s);
  stage_hash_match_->Observe(hash_match_s);
  stage_total_->Observe(total_s);
}

void RouterMetrics::ObservePick(core::Role role, uint32_t cache_hits, uint32_t request_blocks) {
  const size_t r = static_cast<size_t>(role) % 3;
  pick_cache_hits_by_role_[r]->Observe(cache_hits);
  pick_request_blocks_by_role_[r]->Observe(request_blocks);
  prefix_blocks_hit_[r].fetch_add(cache_hits, std::memory_order_relaxed);
  prefix_blocks_[r].fetch_add(request_blocks, std::memory_order_relaxed);
}

std::atomic<uint64_t>* RouterMetrics::PickCounter(core::Role role, const std::string& target_name) {
  return picks_total_.Series(RoleLabel(role) + "," + MetricLabel("worker_id", target_name));
}

void RouterMetrics::CountFailover(const std::string& worker_id) {
  failovers_total_.Add(MetricLabel("worker_id", worker_id));
}

void RouterMetrics::CountUpstreamError(const std::string& worker_id, const char* kind) {
  upstream_errors_total_.Add(MetricLabel("worker_id", worker_id) + "," + MetricLabel("kind", kind));
}

void RouterMetrics::CountLocalError(std::string_view kind) {
  local_errors_total_.Add(MetricLabel("kind", kind));
}

void RouterMetrics::CountPromptEstimated(const char* reason) {
  prompts_estimated_total_.Add(MetricLabel("reason", reason));
}

void RouterMetrics::CountDemandDecision(core::DemandMode mode, bool estimated, bool agrees) {
  if (mode == core::DemandMode::kOff) return;
  const size_t i = (mode == core::DemandMode::kOn ? 4 : 0) + (estimated ? 2 : 0) + (agrees ? 1 : 0);
  demand_decisions_[i]->fetch_add(1, std::memory_order_relaxed);
}

// Infera's Rust router names for series ours already count (rust/router/src/metrics.rs):
// one dashboard scrapes either router. Label values are ours.
void RouterMetrics::RenderInferaAliases(std::string& out) const {
  RenderHeader(out, "infera_requests_total", "counter",
               "Answered requests by router policy and outcome (Infera's name; the counts of "
               "infera_request_duration_seconds).");
  for (size_t i = 0; i < kOutcomeCount; ++i) {
    out += "infera_requests_total{" + policy_label_ + "," +
           MetricLabel("outcome", OutcomeName(static_cast<Outcome>(i))) + "} " +
           std::to_string(requests_by_outcome_[i].load(std::memory_order_relaxed)) + "\n";
  }
  const std::pair<const char*, const std::array<std::atomic<uint64_t>, 3>*> prefix[] = {
      {"infera_prefix_cache_blocks_hit_total", &prefix_blocks_hit_},
      {"infera_prefix_cache_blocks_total", &prefix_blocks_}};
  for (const auto& [name, counts] : prefix) {
    RenderHeader(out, name, "counter",
                 counts == &prefix_blocks_ ? "Prompt blocks of picked requests, by role (Infera's "
                                             "name; the sum of infera_router_pick_request_blocks)."
                                           : "Cache-hit blocks of the picked targets, by role "
                                             "(Infera's name; the sum of "
                                             "infera_router_pick_cache_hits).");
    for (int r = 0; r < 3; ++r) {
      out += std::string(name) + "{" + RoleLabel(core::Role(r)) + "} " +
             std::to_string((*counts)[r].load(std::memory_order_relaxed)) + "\n";
    }
  }
}

void RouterMetrics::Render(std::string& out) const {
  requests_total_.Render(out);
  picks_total_.Render(out);
  failovers_total_.Render(out);
  upstream_errors_total_.Render(out);
  local_errors_total_.Render(out);
  prompts_estimated_total_.Render(out);
  demand_decisions_total_.Render(out);
  render_parity_probes_total_.Render(out);
  health_checks_total_.Render(out);
  health_transitions_total_.Render(out);
  relay_cut_total_.Render(out);
  loops_detected_total_.Render(out);
  workers_refused_total_.Render(out);
  pick_cache_hits_.Render(out);
  pick_request_blocks_.Render(out);
  request_duration_.Render(out);
  overhead_.Render(out);
  pd_.Render(out);
  sessions_.Render(out);
  cache_control_.Render(out);
  RenderInferaAliases(out);
  RenderHeader(out, "infera_request_inflight", "gauge", "Requests being served.");
  out += "infera_request_inflight{" + policy_label_ + "} " +
         std::to_string(inflight_.load(std::memory_order_relaxed)) + "\n";
  RenderHeader(out, "infera_router_tokenize_jobs", "gauge",
               "Prompts being rendered and tokenized on the encoder pool, or waiting for it.");
  out += "infera_router_tokenize_jobs " +
         std::to_string(tokenize_jobs_.load(std::memory_order_relaxed)) + "\n";
}

}  // namespace infera::router
