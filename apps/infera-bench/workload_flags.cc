#include "workload_flags.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "core/selector.h"

namespace infera::bench {

void AddWorkloadFlags(CLI::App& app, WorkloadFlags& f) {
  app.add_option("--trace", f.trace, "Mooncake JSONL trace (hash_ids of 512-token blocks)");
  app.add_option("--workload", f.workload, "trace | shared-prefix | multi-turn | synthetic")
      ->check(CLI::IsMember({"trace", "shared-prefix", "multi-turn", "synthetic"}));
  app.add_option("--requests", f.synthetic.requests, "synthetic: requests");
  app.add_option("--prefixes", f.synthetic.prefixes,
                 "synthetic: distinct system prompts (0: no sharing)");
  app.add_option("--dominant-share", f.synthetic.dominant_share,
                 "synthetic: share of requests with system prompt 0 (the rest uniform)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--burst", f.synthetic.burst,
                 "synthetic: requests arriving together (Poisson bursts at rate / burst)")
      ->check(CLI::PositiveNumber);
  app.add_option("--time-scale", f.mooncake.time_scale,
                 "trace: multiply arrival times (0.5 = twice the rate)");
  app.add_option("--limit", f.mooncake.limit, "trace: first N requests (0 = all)");
  app.add_option("--offset", f.mooncake.offset, "trace: skip the first N requests");
  app.add_option("--max-output-tokens", f.mooncake.max_output_tokens,
                 "trace: cap output lengths (0 = none)");
  app.add_option("--groups", f.shared.groups, "shared-prefix: groups");
  app.add_option("--prompts-per-group", f.shared.prompts_per_group, "shared-prefix");
  app.add_option("--system-tokens", f.shared.system_tokens, "shared-prefix: system prompt");
  app.add_option("--question-tokens", f.shared.question_tokens, "shared-prefix: question");
  app.add_option("--output-tokens", f.shared.output_tokens, "generators: output tokens");
  app.add_option("--rate", f.shared.request_rate, "generators: requests per second (0 = burst)");
  app.add_option("--sessions", f.multi_turn.sessions, "multi-turn: sessions");
  app.add_option("--turns", f.multi_turn.turns, "multi-turn: turns per session");
  app.add_option("--user-tokens", f.multi_turn.user_tokens, "multi-turn: tokens per user turn");
  app.add_option("--seed", f.shared.seed, "generators: seed");
  app.add_option("--images-per-request", f.images_per_request, "attach images to each request");
  app.add_option("--distinct-images", f.distinct_images, "size of the image pool");
}

absl::StatusOr<sim::Workload> BuildWorkload(const WorkloadFlags& flags) {
  sim::Workload w;
  std::string kind = flags.workload;
  if (!flags.trace.empty()) kind = "trace";
  if (kind == "trace") {
    if (flags.trace.empty()) return absl::InvalidArgumentError("--trace FILE is required");
    std::ifstream in(flags.trace, std::ios::binary);
    if (!in) return absl::NotFoundError("cannot open trace " + flags.trace);
    std::ostringstream text;
    text << in.rdbuf();
    absl::StatusOr<sim::Workload> parsed = sim::ParseMooncakeTrace(text.str(), flags.mooncake);
    if (!parsed.ok()) return parsed.status();
    w = std::move(*parsed);
  } else if (kind == "shared-prefix") {
    w = sim::SharedPrefixWorkload(flags.shared);
  } else if (kind == "synthetic") {
    sim::SyntheticOptions o = flags.synthetic;
    o.system_tokens = flags.shared.system_tokens;
    o.question_tokens = flags.shared.question_tokens;
    o.output_tokens = flags.shared.output_tokens;
    o.request_rate = flags.shared.request_rate;
    o.seed = flags.shared.seed;
    w = sim::SyntheticWorkload(o);
  } else {
    sim::MultiTurnOptions o = flags.multi_turn;
    o.system_tokens = flags.shared.system_tokens;
    o.output_tokens = flags.shared.output_tokens;
    o.request_rate = flags.shared.request_rate;
    o.seed = flags.shared.seed;
    w = sim::MultiTurnWorkload(o);
  }
  if (flags.images_per_request > 0) {
    sim::AttachImages(w, flags.images_per_request, flags.distinct_images, flags.shared.seed);
  }
  if (w.requests.empty()) return absl::InvalidArgumentError("the workload has no requests");
  return w;
}

absl::StatusOr<std::vector<PolicySpec>> ParsePolicySpecs(const std::string& list) {
  std::vector<PolicySpec> out;
  for (const std::string& item :
       std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()))) {
    PolicySpec spec;
    const size_t colon = item.find(':');
    spec.name = item.substr(0, colon);
    if (spec.name != kTtftOracle && !core::ParsePolicy(spec.name).ok()) {
      return absl::InvalidArgumentError("unknown policy '" + spec.name + "'");
    }
    if (colon != std::string::npos && spec.name != "kv-aware") {
      return absl::InvalidArgumentError("only kv-aware takes an overlap weight: '" + item + "'");
    }
    if (colon != std::string::npos) {
      std::string weight = item.substr(colon + 1);
      auto parse = [&](const std::string& text, double* out) {
        char* end = nullptr;
        errno = 0;
        *out = std::strtod(text.c_str(), &end);
        return !text.empty() && *end == '\0' && errno == 0 && *out >= 0 && *out <= 1e6;
      };
      const size_t slash = weight.find('/');
      if (slash != std::string::npos) {
        double decode = 0;
        if (!parse(weight.substr(slash + 1), &decode)) {
          return absl::InvalidArgumentError("bad decode overlap weight in '" + item + "'");
        }
        spec.decode_overlap_weight = decode;
        weight = weight.substr(0, slash);
      }
      if (!parse(weight, &spec.overlap_weight)) {
        return absl::InvalidArgumentError("bad overlap weight in '" + item + "'");
      }
    }
    out.push_back(spec);
  }
  if (out.empty()) return absl::InvalidArgumentError("--policies is empty");
  return out;
}

}  // namespace infera::bench
