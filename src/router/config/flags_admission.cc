// The admission queue's flag group and its validation step (doc/admission.md, doc/router.md
// "Admission queue"). The group is the last entry of kFlagGroups (flag_table.cc), the
// step the last of kValidationSteps (validate.cc).
#include <cmath>
#include <string>

#include "router/config/router_flags.h"
#include "router/config/validate.h"

namespace infera::router::config {

// Hold requests in the router while every engine is saturated; bind them when one frees.
void AddAdmissionFlags(CLI::App& app, RouterFlags& f) {
  AdmissionOptions& o = f.options.admission;
  app.add_option("--admission-queue", f.admission_queue,
                 "auto | on | off: hold a request in the router while every candidate has "
                 "--queue-threshold-blocks of prefill pending (or --queue-join-blocks, for a "
                 "cold prompt another request is computing), and bind it when one frees (late "
                 "binding; kv-aware and least-load only; auto: on for kv-aware's mixed pools, "
                 "off otherwise; doc/admission.md)")
      ->capture_default_str();
  app.add_option("--queue-threshold-blocks", o.threshold_blocks,
                 "Pending prefill blocks on the least loaded candidate past which requests wait")
      ->capture_default_str();
  app.add_option("--queue-join-blocks", o.join_blocks,
                 "Pending prefill blocks on the least loaded candidate past which a cold prompt "
                 "that requests in flight would make half cached waits for them, and a prompt "
                 "half cached somewhere passes the queue (0: off; doc/admission.md \"Hold "
                 "rule\")")
      ->capture_default_str();
  app.add_option("--queue-max", f.queue_max,
                 "Requests waiting per pool; one more gets 429 with Retry-After")
      ->capture_default_str();
  app.add_option("--queue-max-wait-s", f.queue_max_wait_s,
                 "A request waiting this long gets 429 with Retry-After (0: no limit)")
      ->capture_default_str();
}

absl::Status ParseAdmissionFlags(RouterFlags& f, const ConfigSources&) {
  AdmissionOptions& o = f.options.admission;
  if (f.admission_queue != "off" && f.admission_queue != "on" && f.admission_queue != "auto") {
    return FlagError("--admission-queue must be auto, on or off, got '" + f.admission_queue + "'");
  }
  const core::Policy policy = f.options.policy.policy;
  // auto: what the simulator measured (doc/results-sim.md, sessions 19 and 20):
  // kv-aware's mixed pools. A PD fleet's prefill pool is queued only when asked for
  // (there the queue lowered the mean but raised the p99 at ~90 %).
  const bool auto_on = f.admission_queue == "auto" && policy == core::Policy::kKvAware;
  o.enabled = f.admission_queue == "on" || auto_on;
  o.pd_pools = f.admission_queue == "on";
  if (!std::isfinite(o.threshold_blocks) || o.threshold_blocks < 0) {
    return FlagError("--queue-threshold-blocks must be a number of blocks >= 0");
  }
  if (!std::isfinite(o.join_blocks) || o.join_blocks < 0) {
    return FlagError("--queue-join-blocks must be a number of blocks >= 0");
  }
  if (f.queue_max == 0) return FlagError("--queue-max must be >= 1");
  if (!std::isfinite(f.queue_max_wait_s) || f.queue_max_wait_s < 0 || f.queue_max_wait_s > 1e9) {
    return FlagError("--queue-max-wait-s must be a number of seconds >= 0");
  }
  o.queue.max_queued = f.queue_max;
  o.queue.max_wait_ns = static_cast<int64_t>(f.queue_max_wait_s * 1e9);
  if (f.admission_queue == "on" && policy != core::Policy::kKvAware && policy != core::Policy::kLeastLoad) {
    return FlagError(std::string("--admission-queue on needs a policy with a load term (kv-aware, "
                                 "least-load); --router-policy is ") +
                     core::PolicyName(policy));
  }
  return absl::OkStatus();
}

}  // namespace infera::router::config
