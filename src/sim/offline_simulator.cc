#include "sim/offline_simulator.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <limits>
#include <memory>
#include <queue>
#include <string>

#include "core/hashing.h"
#include "core/kv_index.h"

namespace infera::sim {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct EngineSlot {
  std::unique_ptr<Engine> engine;
  core::TargetId target = 0;
  bool busy = false;
  StepResult pending;
  std::vector<KvEvent> pending_events;
  int64_t step_end_ns = 0;  // while busy: when `pending` completes
};

struct Delivery {
  int64_t time_ns;
  uint32_t engine;
  std::vector<KvEvent> events;
};

class Simulation {
 public:
  Simulation(const Workload& workload, const OfflineConfig& config, const ProgressFn& progress)
      : workload_(workload),
        config_(config),
        progress_(progress),
        selector_(SelectorPolicy(config), index_, &clock_),
        planner_(selector_, index_, config.pd),
        demand_(config.decode_request_weight),
        guards_(workload.requests.size()) {
    for (size_t e = 0; e < config.total_engines(); ++e) {
      EngineSlot slot;
      slot.engine = std::make_unique<Engine>(config.engine);
      slot.target =
          index_.AddTarget({"sim-engine-" + std::to_string(e), 0}, config.engine.block_size);
      candidates_.push_back(slot.target);
      if (engine_of_.size() <= slot.target) engine_of_.resize(slot.target + 1);
      engine_of_[slot.target] = static_cast<uint32_t>(e);
      if (config.pd_fleet()) {
        const bool prefill = e < config.prefill_engines;
        pd_candidates_.push_back(
            {slot.target, prefill ? core::Role::kPrefill : core::Role::kDecode, "sim"});
        if (prefill) prefill_pool_.push_back(slot.target);
      }
      if (config.capacity_known) {
        selector_.load().SetCapacityBlocks(slot.target, config.engine.num_gpu_blocks);
        selector_.load().SetMaxSeqs(slot.target, config.engine.max_num_seqs);
      }
      engines_.push_back(std::move(slot));
    }
    if (config.pd_fleet()) {
      prefill_guards_.resize(workload.requests.size());
      reservations_.resize(workload.requests.size());
      booked_tokens_.assign(workload.requests.size(), 0);
      decode_inflight_.assign(config.decode_engines, 0);
      if (config.decode_demand != core::DemandMode::kOff) {
        planner_.set_choose_decode([this](const core::RoutingInput&,
                                          std::span<const core::TargetId> decode,
                                          const core::PickResult& original) {
          keys_.clear();
          loads_.clear();
          size_t at = 0;
          for (size_t k = 0; k < decode.size(); ++k) {
            keys_.push_back(index_.Key(decode[k]).ToString());
            loads_.push_back(k < original.costs.size() ? original.costs[k] : 0);
            if (decode[k] == original.picked) at = k;
          }
          const core::DemandDecision d =
              demand_.Decide(config_.decode_demand, keys_, loads_, demand_tokens_, at);
          ++result_.demand_decisions;
          if (d.agrees()) ++result_.demand_agreements;
          return std::optional<size_t>(d.chosen);
        });
      }
    }
    result_.requests.resize(workload.requests.size());
    const int64_t span = workload.requests.empty() ? 0 : workload.requests.back().arrival_ns;
    sample_interval_ns_ = config.sample_interval_ns > 0
                              ? config.sample_interval_ns
                              : std::max<int64_t>(1'000'000'000, span / 400);
  }

  OfflineResult Run() {
    const size_t n = workload_.requests.size();
    size_t next = 0;
    while (true) {
      const int64_t t_arrival = next < n ? workload_.requests[next].arrival_ns : kNever;
      const int64_t t_step = steps_.empty() ? kNever : steps_.top().first;
      const int64_t t_delivery = deliveries_.empty() ? kNever : deliveries_.front().time_ns;
      const int64_t t_handoff = handoffs_.empty() ? kNever : handoffs_.top().first;
      const int64_t t = std::min({t_arrival, t_step, t_delivery, t_handoff});
      if (t == kNever) break;
      clock_.Set(t);  // the selector's now (timed prefill, prefill-rate samples)
      Sample(t);
      if (t_delivery == t) {
        Deliver();
        Drain(t);
      } else if (t_step == t) {
        const uint32_t e = steps_.top().second;
        steps_.pop();
        CompleteStep(e, t);
        Drain(t);
      } else if (t_handoff == t) {
        const size_t i = handoffs_.top().second;
        handoffs_.pop();
        Handoff(i, t);
      } else {
        Arrive(next++, t);
        if (progress_ && (next % 256 == 0 || next == n)) progress_(next, n);
      }
      result_.end_ns = t;
    }
    if (queue_) result_.queue = queue_->stats();
    for (const EngineSlot& s : engines_) {
      result_.engine_stats.push_back(s.engine->stats());
      result_.engine_block_counts.push_back(s.engine->cache().NumCached());
      result_.router_block_counts.push_back(index_.BlockCount(s.target));
    }
    return std::move(result_);
  }

 private:
  void Sample(int64_t t) {
    while (next_sample_ns_ <= t) {
      std::vector<uint32_t> load;
      std::vector<float> kv;
      load.reserve(engines_.size());
      kv.reserve(engines_.size());
      for (const EngineSlot& s : engines_) {
        load.push_back(static_cast<uint32_t>(s.engine->NumRunning() + s.engine->NumWaiting()));
        const KvCache& cache = s.engine->cache();
        kv.push_back(static_cast<float>(cache.NumUsed()) / static_cast<float>(cache.num_blocks()));
      }
      result_.sample_times_ns.push_back(next_sample_ns_);
      result_.load_samples.push_back(std::move(load));
      result_.kv_samples.push_back(std::move(kv));
      if (config_.pd_fleet()) result_.decode_input_samples.push_back(decode_inflight_);
      next_sample_ns_ += sample_interval_ns_;
    }
  }

  void StartStep(uint32_t e, int64_t t) {
    EngineSlot& s = engines_[e];
    s.pending = s.engine->Step();
    s.pending_events = s.engine->TakeEvents();
    s.busy = true;
    if (config_.pd_fleet() && e >= config_.prefill_engines) {
      result_.decode_step_ns.push_back(s.pending.duration_ns);
    }
    // A step always computes something (the engine's invariant); 1 µs keeps virtual
    // time moving even if a zero-cost timing model is configured.
    s.step_end_ns = t + std::max<int64_t>(s.pending.duration_ns, 1000);
    steps_.push({s.step_end_ns, e});
  }

  void CompleteStep(uint32_t e, int64_t t) {
    EngineSlot& s = engines_[e];
    const bool prefill_engine = config_.pd_fleet() && e < config_.prefill_engines;
    for (const TokenOutput& o : s.pending.outputs) {
      RequestOutcome& r = result_.requests[o.request_id];
      if (prefill_engine) {
        PrefillDone(o, t);
        continue;
      }
      if (o.index == 0 && r.prefill_engine >= 0) {
        // The decode leg of a disaggregated request: the prefill hit stays the request's.
        r.first_token_ns = t;
        r.decode_cached_tokens = o.cached_tokens;
        guards_[o.request_id].PrefillDone(t);
      } else if (o.index == 0) {
        r.first_token_ns = t;
        r.cached_tokens = o.cached_tokens;
        guards_[o.request_id].PrefillDone(t);
        if (config_.release_load_at_first_token) guards_[o.request_id].Release();
      }
      r.output_tokens = o.index + 1;
      if (o.finished) {
        r.finish_ns = t;
        core::LoadState::ActiveGuard done = std::move(guards_[o.request_id]);
        done.Release();
        Unbook(o.request_id);
      }
    }
    s.pending.outputs.clear();
    if (approx_) s.pending_events.clear();  // approximate mode: no KV events
    if (!s.pending_events.empty()) {
      deliveries_.push_back({t + config_.event_delay_ns, e, std::move(s.pending_events)});
      s.pending_events.clear();
    }
    s.busy = false;
    if (s.engine->HasWork()) StartStep(e, t);
  }

  void Deliver() {
    Delivery d = std::move(deliveries_.front());
    deliveries_.pop_front();
    const core::TargetId target = engines_[d.engine].target;
    for (const KvEvent& ev : d.events) {
      ++result_.kv_events_applied;
      switch (ev.kind) {
        case KvEvent::Kind::kBlockStored: {
          core::StoreOutcome out =
              index_.ApplyStored(target, ev.parent_hash, ev.block_hashes, ev.token_ids, ev.medium);
          if (out == core::StoreOutcome::kUnknownParent) ++result_.kv_event_unknown_parent;
          break;
        }
        case KvEvent::Kind::kBlockRemoved:
          index_.ApplyRemoved(target, ev.block_hashes, ev.medium);
          break;
        case KvEvent::Kind::kAllBlocksCleared:
          index_.ApplyCleared(target);
          break;
      }
    }
  }

  // The prefill leg answered (its one token): release its load, move the KV.
  void PrefillDone(const TokenOutput& o, int64_t t) {
    RequestOutcome& r = result_.requests[o.request_id];
    r.cached_tokens = o.cached_tokens;
    r.prefill_done_ns = t;
    prefill_guards_[o.request_id].PrefillDone(t);  // a prefill-rate sample
    prefill_guards_[o.request_id].Release();
    workload_.Materialize(workload_.requests[o.request_id], tokens_);
    const size_t local = engines_[r.engine].engine->CachedPrefixTokens(tokens_);
    r.transfer_ns = static_cast<int64_t>(
        config_.kv_transfer.TransferNs(tokens_.size() - std::min(local, tokens_.size())) /
        config_.engine.timing.speedup);
    handoffs_.push({t + r.transfer_ns, o.request_id});
  }

  // The KV has arrived at the decode engine: it runs the rest of the request.
  void Handoff(size_t i, int64_t t) {
    RequestOutcome& r = result_.requests[i];
    const WorkloadRequest& w = workload_.requests[i];
    std::vector<core::TokenId> tokens;
    workload_.Materialize(w, tokens);
    Submit(i, r.engine, {i, std::move(tokens), w.output_tokens, /*remote_prefill=*/true}, t);
  }

  void Submit(size_t i, uint32_t e, EngineRequest request, int64_t t) {
    EngineSlot& s = engines_[e];
    if (!s.engine->AddRequest(std::move(request))) {
      result_.requests[i].rejected = true;
      guards_[i].Release();
      if (!prefill_guards_.empty()) prefill_guards_[i].Release();
      Unbook(i);
      return;
    }
    if (!s.busy) StartStep(e, t);
  }

  void ArrivePd(size_t i, const core::RoutingInput& input, std::vector<core::TokenId> tokens,
                int64_t t) {
    const WorkloadRequest& w = workload_.requests[i];
    RequestOutcome& r = result_.requests[i];
    ExpireApprox(t);
    demand_tokens_ = w.prompt_tokens;  // n = 1
    absl::StatusOr<core::PdPlan> plan = planner_.Plan(input, pd_candidates_);
    assert(plan.ok());  // both pools are always present
    if (plan->prefill) RecordApprox(*plan->prefill, tokens, t);
    RecordApprox(plan->main, tokens, t);
    r.engine = engine_of_[plan->main.picked];
    guards_[i] = std::move(plan->main.guard);
    // The decode pick's booking (the same span as the router's reservation).
    booked_tokens_[i] = w.prompt_tokens;
    decode_inflight_[r.engine - config_.prefill_engines] += w.prompt_tokens;
    if (config_.decode_demand != core::DemandMode::kOff) {
      reservations_[i] = demand_.Reserve(index_.Key(plan->main.picked).ToString(), demand_tokens_);
    }
    if (plan->kind == core::PdPlanKind::kDecodeOnly) {
      r.decode_only = true;
      r.router_hits = plan->main.cache_hits;
      Submit(i, r.engine, {i, std::move(tokens), w.output_tokens}, t);
      return;
    }
    r.prefill_engine = static_cast<int32_t>(engine_of_[plan->prefill->picked]);
    r.router_hits = plan->prefill->cache_hits;
    prefill_guards_[i] = std::move(plan->prefill->guard);
    Submit(i, static_cast<uint32_t>(r.prefill_engine), {i, std::move(tokens), 1}, t);
  }

  void Arrive(size_t i, int64_t t) {
    const WorkloadRequest& w = workload_.requests[i];
    RequestOutcome& r = result_.requests[i];
    r.arrival_ns = t;
    r.prompt_tokens = w.prompt_tokens;
    if (queue_) {
      ExpireQueued(t);
      core::RoutingInput input;
      std::vector<core::TokenId> tokens;
      if (config_.queue_join_blocks > 0) {
        workload_.Materialize(w, tokens);
        input.role = config_.pd_fleet() ? core::Role::kPrefill : core::Role::kMixed;
        input.tokens = std::span<const core::TokenId>(tokens);
        input.image_keys = w.image_keys;
      }
      const core::Selector::Hold hold =
          selector_.AdviseHold(input, QueuePool(), config_.queue_threshold_blocks,
                               config_.queue_join_blocks, !queue_->empty());
      if (hold == core::Selector::Hold::kBypass) return Bind(i, t, std::move(tokens));
      switch (queue_->Offer(i, std::to_string(w.session), 0, t,
                            hold == core::Selector::Hold::kWait)) {
        case core::Admission::kBindNow:
          break;
        case core::Admission::kQueued:
          return;
        case core::Admission::kRejected:
          r.shed = true;
          return;
      }
      return Bind(i, t, std::move(tokens));
    }
    Bind(i, t, {});
  }

  // The engines whose load the queue watches: a PD fleet's prefill pool (a PD
  // request's queueing is its prefill leg's, as in the router), else every engine.
  std::span<const core::TargetId> QueuePool() const {
    return config_.pd_fleet() ? std::span<const core::TargetId>(prefill_pool_)
                              : std::span<const core::TargetId>(candidates_);
  }

  // Requests held too long are shed.
  void ExpireQueued(int64_t t) {
    for (uint64_t id : queue_->Expire(t)) {
      result_.requests[id].shed = true;
      result_.requests[id].queue_ns = t - result_.requests[id].arrival_ns;
    }
  }

  // Binds held requests while some engine's load is under the release threshold (late
  // binding: the pick sees the load of now, not of the arrival).
  void Drain(int64_t t) {
    if (!queue_ || queue_->empty()) return;
    ExpireQueued(t);
    const double below =
        core::Selector::ReleaseBelow(config_.queue_threshold_blocks, config_.queue_join_blocks);
    while (!queue_->empty() && selector_.MinLoad(QueuePool()) < below) {
      const uint64_t i = *queue_->PopNext(t);
      result_.requests[i].queue_ns = t - result_.requests[i].arrival_ns;
      Bind(i, t, {});
    }
  }

  // The pick and the engine submission of request i at time t. `tokens`: its prompt,
  // when the caller materialized it already (the join hold's advice), else empty.
  void Bind(size_t i, int64_t t, std::vector<core::TokenId> tokens) {
    const WorkloadRequest& w = workload_.requests[i];
    RequestOutcome& r = result_.requests[i];
    if (tokens.empty()) workload_.Materialize(w, tokens);
    request_id_ = "r" + std::to_string(i);
    core::RoutingInput input;
    input.role = core::Role::kMixed;
    input.request_id = request_id_;
    input.tokens = std::span<const core::TokenId>(tokens);
    input.image_keys = w.image_keys;
    if (config_.pd_fleet()) {
      ArrivePd(i, input, std::move(tokens), t);
      return;
    }
    ExpireApprox(t);
    // Only the winner is read: the pruned pick (the same winner, doc/selection.md).
    input.exact_costs = false;
    // The TTFT oracle books its engine through the selector too (a one-candidate pick).
    const std::span<const core::TargetId> pool =
        config_.ttft_oracle ? std::span<const core::TargetId>(
                                  &candidates_[OracleEngine(i, t, tokens, w.output_tokens)], 1)
                            : std::span<const core::TargetId>(candidates_);
    absl::StatusOr<core::PickResult> pick = selector_.Pick(input, pool);
    assert(pick.ok());  // candidates are never empty
    RecordApprox(*pick, tokens, t);
    const auto it = std::find(candidates_.begin(), candidates_.end(), pick->picked);
    const uint32_t e = static_cast<uint32_t>(it - candidates_.begin());
    r.engine = e;
    r.router_hits = pick->cache_hits;
    guards_[i] = std::move(pick->guard);
    EngineSlot& s = engines_[e];
    if (!s.engine->AddRequest({i, std::move(tokens), w.output_tokens})) {
      r.rejected = true;
      guards_[i].Release();
      return;
    }
    if (!s.busy) StartStep(e, t);
  }

  // The TTFT oracle's engine for request i at time t: each engine's copy gets the
  // request and steps (from the end of the step it is in) until the request's first
  // token; the soonest wins, the scan starting at i mod engines (ties rotate).
  uint32_t OracleEngine(size_t i, int64_t t, const std::vector<core::TokenId>& tokens,
                        size_t output_tokens) {
    const size_t n = engines_.size();
    uint32_t best = static_cast<uint32_t>(i % n);
    int64_t best_ttft = std::numeric_limits<int64_t>::max();
    for (size_t j = 0; j < n; ++j) {
      const size_t e = (i + j) % n;
      const EngineSlot& s = engines_[e];
      std::unique_ptr<Engine> copy = s.engine->Clone();
      if (!copy->AddRequest({i, tokens, output_tokens})) continue;  // never fits: skip
      int64_t now = s.busy ? std::max(t, s.step_end_ns) : t;
      // Every step computes something while the request waits, so this ends; it stops
      // early once this engine cannot beat the best so far.
      while (now - t < best_ttft) {
        const StepResult step = copy->Step();
        now += std::max<int64_t>(step.duration_ns, 1000);
        const bool first = std::any_of(step.outputs.begin(), step.outputs.end(),
                                       [&](const TokenOutput& o) { return o.request_id == i; });
        if (first) {
          if (now - t < best_ttft) {
            best_ttft = now - t;
            best = static_cast<uint32_t>(e);
          }
          break;
        }
      }
    }
    return best;
  }

  static core::PolicyConfig SelectorPolicy(const OfflineConfig& config) {
    core::PolicyConfig policy = config.policy;
    if (config.approx.ttl_ns > 0) policy.settle_from_views = false;  // as the router
    return policy;
  }

  // Approximate mode: the router's side, as router::ApproxRecorder does it.
  void ExpireApprox(int64_t t) {
    if (!approx_) return;
    approx_->Expire(t, [&](core::TargetId target, std::span<const core::BlockHash> gone) {
      index_.RemoveRouterHashes(target, gone, core::Tier::kDevice);
    });
  }
  void RecordApprox(const core::PickResult& pick, std::span<const core::TokenId> tokens,
                    int64_t t) {
    if (!approx_ || pick.policy != core::Policy::kKvAware) return;
    chain_.clear();
    core::AppendChain(tokens, config_.engine.block_size, 0, chain_);
    removed_.clear();
    std::vector<core::BlockHash> added = approx_->Record(pick.picked, chain_, t, removed_);
    if (!removed_.empty()) index_.RemoveRouterHashes(pick.picked, removed_, core::Tier::kDevice);
    if (!added.empty()) index_.InsertRouterHashes(pick.picked, added, core::Tier::kDevice);
  }

  // The request's decode booking ends (last token, or rejected).
  void Unbook(size_t i) {
    if (booked_tokens_.empty() || booked_tokens_[i] == 0) return;
    decode_inflight_[result_.requests[i].engine - config_.prefill_engines] -= booked_tokens_[i];
    booked_tokens_[i] = 0;
    reservations_[i].Release();
  }

  const Workload& workload_;
  const OfflineConfig& config_;
  const ProgressFn& progress_;
  core::KvIndex index_;
  core::ManualClock clock_;  // virtual time, set at every event
  core::Selector selector_;
  core::PdPlanner planner_;
  core::DecodeDemand demand_;
  std::vector<core::DecodeDemand::Reservation> reservations_;  // PD: by request
  std::vector<uint64_t> booked_tokens_;                        // PD: by request
  std::vector<uint64_t> decode_inflight_;                      // PD: by decode engine
  uint64_t demand_tokens_ = 0;                                 // the arriving request's
  std::vector<std::string> keys_;                              // demand scratch
  std::vector<double> loads_;
  std::vector<EngineSlot> engines_;
  std::vector<core::TargetId> candidates_;
  std::vector<core::PdCandidate> pd_candidates_;
  std::vector<core::TargetId> prefill_pool_;  // PD: the prefill engines (the queue's pool)
  std::vector<uint32_t> engine_of_;                           // TargetId -> engine
  std::vector<core::LoadState::ActiveGuard> guards_;          // decode (or only) leg
  std::vector<core::LoadState::ActiveGuard> prefill_guards_;  // PD fleets
  std::priority_queue<std::pair<int64_t, size_t>, std::vector<std::pair<int64_t, size_t>>,
                      std::greater<>>
      handoffs_;                       // KV arrivals at decode engines
  std::vector<core::TokenId> tokens_;  // scratch
  std::priority_queue<std::pair<int64_t, uint32_t>, std::vector<std::pair<int64_t, uint32_t>>,
                      std::greater<>>
      steps_;
  std::deque<Delivery> deliveries_;
  std::string request_id_;
  std::unique_ptr<core::ApproxCache> approx_ =
      config_.approx.ttl_ns > 0 ? std::make_unique<core::ApproxCache>(config_.approx) : nullptr;
  std::unique_ptr<core::AdmissionQueue> queue_ =
      config_.admission_queue ? std::make_unique<core::AdmissionQueue>(config_.queue) : nullptr;
  std::vector<core::BlockHash> chain_, removed_;  // approximate mode's scratch
  int64_t next_sample_ns_ = 0;
  int64_t sample_interval_ns_ = 0;
  OfflineResult result_;
};

}  // namespace

OfflineResult RunOffline(const Workload& workload, const OfflineConfig& config,
                         const ProgressFn& progress) {
  assert(config.total_engines() > 0);
  Simulation sim(workload, config, progress);
  return sim.Run();
}

}  // namespace infera::sim
