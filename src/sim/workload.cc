#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/splitmix64.h"
#include "core/clock.h"

namespace infera::sim {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  return base::SplitMix64Finalize(a * 0x9e3779b97f4a7c15ULL + b + 0x7f4a7c159e3779b9ULL);
}

// Seed namespaces, so a Mooncake hash id never equals a generator's segment.
constexpr uint64_t kMooncakeSpace = 0x6d6f6f6e63616b65ULL;
constexpr uint64_t kSharedSpace = 0x7368617265642d70ULL;
constexpr uint64_t kTurnSpace = 0x6d756c74692d7475ULL;
constexpr uint64_t kSyntheticSpace = 0x73796e7468657469ULL;

int64_t ArrivalNs(size_t i, double rate) {
  if (rate <= 0) return 0;
  return static_cast<int64_t>(std::llround(static_cast<double>(i) * 1e9 / rate));
}

void Add(WorkloadRequest& r, uint64_t seed, uint32_t length) {
  if (length == 0) return;
  r.segments.push_back({seed, length});
  r.prompt_tokens += length;
}

}  // namespace

core::TokenId SegmentToken(uint64_t seed, uint32_t j, uint32_t vocab_size) {
  const uint32_t v = vocab_size > 1 ? vocab_size - 1 : 1;
  return static_cast<core::TokenId>(1 + Mix(seed, j) % v);
}

void Workload::Materialize(const WorkloadRequest& request, std::vector<core::TokenId>& out) const {
  out.clear();
  out.reserve(request.prompt_tokens);
  for (const Segment& s : request.segments) {
    for (uint32_t j = 0; j < s.length; ++j) out.push_back(SegmentToken(s.seed, j, vocab_size));
  }
}

uint64_t Workload::TotalPromptTokens() const {
  uint64_t n = 0;
  for (const WorkloadRequest& r : requests) n += r.prompt_tokens;
  return n;
}

absl::StatusOr<Workload> ParseMooncakeTrace(std::string_view jsonl,
                                            const MooncakeOptions& options) {
  Workload w;
  if (options.block_tokens == 0) return absl::InvalidArgumentError("block_tokens must be > 0");
  size_t line_no = 0, index = 0;
  int64_t first_ts = -1;
  while (!jsonl.empty()) {
    const size_t eol = jsonl.find('\n');
    std::string_view line = jsonl.substr(0, eol);
    jsonl = eol == std::string_view::npos ? std::string_view() : jsonl.substr(eol + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const size_t this_index = index++;
    if (this_index < options.offset) continue;
    if (options.limit > 0 && w.requests.size() >= options.limit) break;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace line ", line_no, ": ", std::string(why)));
    };
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    auto ts = j.find("timestamp");
    auto in = j.find("input_length");
    auto out = j.find("output_length");
    auto ids = j.find("hash_ids");
    if (ts == j.end() || !ts->is_number() || ts->get<double>() < 0) return bad("bad timestamp");
    if (in == j.end() || !in->is_number_unsigned()) return bad("bad input_length");
    if (out == j.end() || !out->is_number_unsigned()) return bad("bad output_length");
    if (ids == j.end() || !ids->is_array()) return bad("bad hash_ids");
    const uint64_t input_length = in->get<uint64_t>();
    if (input_length == 0 || input_length > (1u << 24)) return bad("input_length out of range");
    const uint64_t bt = options.block_tokens;
    if (ids->size() != (input_length + bt - 1) / bt) {
      return bad("hash_ids do not cover input_length");
    }
    WorkloadRequest r;
    const int64_t ts_ms = static_cast<int64_t>(ts->get<double>());
    if (first_ts < 0) first_ts = ts_ms;
    if (ts_ms < first_ts) return bad("timestamps go backwards");
    r.arrival_ns = static_cast<int64_t>(
        std::llround(static_cast<double>(ts_ms - first_ts) * 1e6 * options.time_scale));
    uint64_t left = input_length;
    for (const nlohmann::json& id : *ids) {
      if (!id.is_number_unsigned()) return bad("hash id is not a non-negative integer");
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(left, bt));
      Add(r, Mix(kMooncakeSpace, id.get<uint64_t>()), len);
      left -= len;
    }
    uint64_t output = std::max<uint64_t>(1, out->get<uint64_t>());
    if (options.max_output_tokens > 0)
      output = std::min<uint64_t>(output, options.max_output_tokens);
    r.output_tokens = static_cast<uint32_t>(std::min<uint64_t>(output, 1u << 20));
    w.requests.push_back(std::move(r));
  }
  return w;
}

Workload SharedPrefixWorkload(const SharedPrefixOptions& o) {
  Workload w;
  const size_t total = o.groups * o.prompts_per_group;
  w.requests.reserve(total);
  for (size_t i = 0; i < total; ++i) {
    const size_t group = o.interleave ? i % o.groups : i / o.prompts_per_group;
    const size_t k = o.interleave ? i / o.groups : i % o.prompts_per_group;
    WorkloadRequest r;
    r.arrival_ns = ArrivalNs(i, o.request_rate);
    Add(r, Mix(Mix(kSharedSpace, o.seed), group), o.system_tokens);
    Add(r, Mix(Mix(Mix(kSharedSpace, o.seed), group), k + 1), o.question_tokens);
    r.output_tokens = std::max<uint32_t>(1, o.output_tokens);
    w.requests.push_back(std::move(r));
  }
  return w;
}

Workload MultiTurnWorkload(const MultiTurnOptions& o) {
  Workload w;
  const uint64_t base = Mix(kTurnSpace, o.seed);
  size_t i = 0;
  for (size_t turn = 0; turn < o.turns; ++turn) {
    for (size_t s = 0; s < o.sessions; ++s) {
      WorkloadRequest r;
      r.arrival_ns = ArrivalNs(i++, o.request_rate);
      r.session = s + 1;
      Add(r, base, o.system_tokens);  // one system prompt for all sessions
      for (size_t t = 0; t <= turn; ++t) {
        Add(r, Mix(Mix(base, s + 1), 2 * t), o.user_tokens);
        if (t < turn) Add(r, Mix(Mix(base, s + 1), 2 * t + 1), o.output_tokens);
      }
      r.output_tokens = std::max<uint32_t>(1, o.output_tokens);
      w.requests.push_back(std::move(r));
    }
  }
  return w;
}

Workload SyntheticWorkload(const SyntheticOptions& o) {
  Workload w;
  core::Random rng(Mix(kSyntheticSpace, o.seed));
  const uint64_t base = Mix(kSyntheticSpace, o.seed + 1);
  auto around = [&](uint32_t mean) {
    if (mean < 2) return std::max<uint32_t>(mean, 1);
    return static_cast<uint32_t>(mean / 2 + rng.Uniform(mean + 1));
  };
  const size_t burst = std::max<size_t>(1, o.burst);
  double t_s = 0;
  w.requests.reserve(o.requests);
  for (size_t i = 0; i < o.requests; ++i) {
    if (i % burst == 0 && i > 0 && o.request_rate > 0) {
      // Exponential gap of the bursts' Poisson process (rate / burst).
      const double u = std::max(1e-12, rng.UniformDouble());
      t_s += -std::log(u) * static_cast<double>(burst) / o.request_rate;
    }
    WorkloadRequest r;
    r.arrival_ns = static_cast<int64_t>(std::llround(t_s * 1e9));
    if (o.prefixes > 0) {
      const bool dominant = rng.UniformDouble() < o.dominant_share;
      const uint64_t prefix = dominant ? 0 : rng.Uniform(o.prefixes);
      Add(r, Mix(base, prefix), o.system_tokens);
    }
    Add(r, Mix(Mix(base, 0xffffffffULL), i), around(o.question_tokens));
    r.output_tokens = std::max<uint32_t>(1, around(o.output_tokens));
    w.requests.push_back(std::move(r));
  }
  return w;
}

void AttachImages(Workload& workload, size_t images_per_request, size_t distinct_images,
                  uint64_t seed) {
  if (images_per_request == 0 || distinct_images == 0) return;
  core::Random rng(seed);
  for (WorkloadRequest& r : workload.requests) {
    r.image_keys.clear();
    for (size_t i = 0; i < images_per_request; ++i) {
      r.image_keys.push_back(Mix(seed, rng.Uniform(distinct_images)));
    }
  }
}

}  // namespace infera::sim
