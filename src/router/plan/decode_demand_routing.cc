#include "router/plan/decode_demand_routing.h"

#include <cmath>
#include <cstdlib>

#include "router/metrics/router_metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

// The `decode_demand` logger (its level: --log-level info,decode_demand=debug). It
// writes where the default logger writes.
spdlog::logger& DemandLogger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("decode_demand")) return existing;
    const auto& sinks = spdlog::default_logger()->sinks();
    auto created = std::make_shared<spdlog::logger>("decode_demand", sinks.begin(), sinks.end());
    spdlog::initialize_logger(created);
    return created;
  }();
  return *logger;
}

}  // namespace

absl::StatusOr<DemandOptions> ParseDemandOptions(const std::optional<std::string>& mode,
                                                 const std::optional<std::string>& weight,
                                                 core::Policy policy) {
  DemandOptions out;
  if (mode) {
    auto parsed = core::ParseDemandMode(*mode);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError("--decode-input-demand (or INFERA_DECODE_INPUT_DEMAND): " +
                                        std::string(parsed.status().message()));
    }
    out.mode = *parsed;
  }
  if (out.mode != core::DemandMode::kOff && policy != core::Policy::kKvAware) {
    return absl::InvalidArgumentError(
        std::string("--decode-input-demand ") + core::DemandModeName(out.mode) +
        " requires --router-policy kv-aware (the policy is " + core::PolicyName(policy) + ")");
  }
  if (weight) {
    if (out.mode == core::DemandMode::kOff) {
      return absl::InvalidArgumentError(
          "--decode-request-weight (or INFERA_DECODE_REQUEST_WEIGHT) requires "
          "--decode-input-demand shadow or on");
    }
    char* end = nullptr;
    const double w = std::strtod(weight->c_str(), &end);
    if (weight->empty() || end != weight->c_str() + weight->size() || !std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(
          "--decode-request-weight (or INFERA_DECODE_REQUEST_WEIGHT) must be a finite number "
          ">= 0, not '" +
          *weight + "'");
    }
    out.request_weight = w;
  }
  return out;
}

DecodeDemandRouting::DecodeDemandRouting(DemandOptions options, RouterMetrics& metrics)
    : options_(options), metrics_(metrics), demand_(options.request_weight) {
  if (enabled()) DemandLogger();  // registered before the first pick
}

std::string DecodeDemandRouting::KeyOf(const FleetWorker& worker, core::TargetId target) {
  return worker.TargetName(worker.RankIndex(target));
}

void DecodeDemandRouting::Begin(const RequestContext& ctx) {
  request_id_ = ctx.request_id;
  const uint64_t tokens = ctx.tokens ? ctx.tokens->size() : ctx.api.estimated_tokens;
  demand_tokens_ = core::DecodeDemand::Demand(tokens, ctx.api.n);
  request_estimated_ = !ctx.tokens || !ctx.api.image_keys.empty();
  decided_ = false;
}

std::optional<size_t> DecodeDemandRouting::Choose(std::span<const core::TargetId> decode,
                                                  const core::PickResult& original,
                                                  const OwnerFn& owner_of) {
  keys_.clear();
  loads_.clear();
  size_t original_index = 0;
  for (size_t i = 0; i < decode.size(); ++i) {
    const FleetWorker* owner = owner_of(decode[i]);
    keys_.push_back(owner != nullptr ? KeyOf(*owner, decode[i]) : std::string());
    // Ties: the original policy's cost of the candidate (its load-based score).
    loads_.push_back(i < original.costs.size() ? original.costs[i] : 0);
    if (decode[i] == original.picked) original_index = i;
  }
  decision_ = demand_.Decide(options_.mode, keys_, loads_, demand_tokens_, original_index);
  decided_ = true;
  return decision_.chosen;
}

core::DecodeDemand::Reservation DecodeDemandRouting::Book(const core::PickResult& pick,
                                                          const FleetWorker& owner) {
  const std::string key = KeyOf(owner, pick.picked);
  const bool estimated =
      request_estimated_ || owner.renders_differently.load(std::memory_order_relaxed);
  if (decided_) {
    metrics_.CountDemandDecision(options_.mode, estimated, decision_.agrees());
    spdlog::logger& log = DemandLogger();
    if (log.should_log(spdlog::level::debug)) {
      std::string candidates;
      for (size_t i = 0; i < keys_.size(); ++i) {
        if (i > 0) candidates += ',';
        candidates += keys_[i] + ':' + std::to_string(demand_.Tokens(keys_[i]) + demand_tokens_) +
                      ':' + std::to_string(demand_.Requests(keys_[i]));
      }
      // Never prompt or session text: the request id, keys and counts only.
      log.debug(
          "decode_demand mode={} request_id={} input={} demand_tokens={} weight={} "
          "candidates={} original={} suggestion={} chosen={} agrees={}",
          core::DemandModeName(options_.mode), request_id_, estimated ? "estimated" : "exact",
          demand_tokens_, options_.request_weight, candidates, keys_[decision_.original],
          keys_[decision_.suggestion], key, decision_.agrees() ? "true" : "false");
    }
  }
  decided_ = false;
  return demand_.Reserve(key, demand_tokens_);
}

void DecodeDemandRouting::Forget(const FleetWorker& worker) {
  for (size_t r = 0; r < worker.targets.size(); ++r) demand_.Forget(worker.TargetName(r));
}

}  // namespace infera::router
