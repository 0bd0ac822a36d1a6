// Workload: the requests a benchmark replays, held compactly (doc/sim.md).
//
// A prompt is a list of segments; segment {seed, length} stands for the tokens
// SegmentToken(seed, j), j = 0 .. length−1. Equal seeds give equal tokens, so
// prefix sharing is expressed by sharing segments, and a whole trace fits in memory
// without its token ids (Materialize() builds one prompt on demand).
//
// Sources:
//  * ParseMooncakeTrace: Mooncake JSONL (`timestamp` ms, `input_length`,
//    `output_length`, `hash_ids` of 512-token blocks). hash id h becomes segment
//    {h, 512}; the last one is cut to make `input_length` (a prompt may end
//    mid-block, and its partial block is a prefix of block h's tokens).
//  * SharedPrefixWorkload: groups × prompts per group; each group has a system
//    prompt, each prompt its own question.
//  * MultiTurnWorkload: sessions whose every turn repeats the whole history
//    (previous user turns and replies) and adds a new user message.
// Any source can attach images (`image_keys`).
//
// Thread-safety: immutable after construction; Materialize is const.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/types.h"

namespace infera::sim {

struct Segment {
  uint64_t seed = 0;
  uint32_t length = 0;
};

struct WorkloadRequest {
  int64_t arrival_ns = 0;
  std::vector<Segment> segments;
  uint32_t prompt_tokens = 0;  // sum of segment lengths
  uint32_t output_tokens = 1;
  std::vector<uint64_t> image_keys;
  uint64_t session = 0;  // multi-turn: the session; otherwise 0
};

// Token j of segment `seed`: never 0 and below `vocab_size`.
core::TokenId SegmentToken(uint64_t seed, uint32_t j, uint32_t vocab_size);

struct Workload {
  std::vector<WorkloadRequest> requests;  // in arrival order
  uint32_t vocab_size = 32000;

  // The prompt's token ids, into `out` (cleared first).
  void Materialize(const WorkloadRequest& request, std::vector<core::TokenId>& out) const;
  uint64_t TotalPromptTokens() const;
};

struct MooncakeOptions {
  double time_scale = 1.0;  // arrival times are multiplied by this (0.5 = twice as fast)
  size_t limit = 0;         // keep the first `limit` requests (0 = all)
  size_t offset = 0;        // skip this many requests first
  uint32_t block_tokens = 512;
  uint32_t max_output_tokens = 0;  // cap output lengths (0 = none)
};

// Parses the JSONL text. InvalidArgument names the line on bad input (non-JSON,
// missing or negative fields, hash_ids that cannot make input_length).
absl::StatusOr<Workload> ParseMooncakeTrace(std::string_view jsonl, const MooncakeOptions& options);

struct SharedPrefixOptions {
  size_t groups = 8;
  size_t prompts_per_group = 16;
  uint32_t system_tokens = 2048;
  uint32_t question_tokens = 128;
  uint32_t output_tokens = 64;
  double request_rate = 4.0;  // requests per second (evenly spaced; 0 = all at t=0)
  bool interleave = true;     // round-robin over groups instead of group after group
  uint64_t seed = 1;
};
Workload SharedPrefixWorkload(const SharedPrefixOptions& options);

struct MultiTurnOptions {
  size_t sessions = 16;
  size_t turns = 4;
  uint32_t system_tokens = 512;
  uint32_t user_tokens = 256;
  uint32_t output_tokens = 128;
  double request_rate = 4.0;  // requests per second, turns of all sessions interleaved
  uint64_t seed = 2;
};
Workload MultiTurnWorkload(const MultiTurnOptions& options);

// Synthetic traffic for the load sweeps (doc/results-sim.md, issue 25): each request
// is a system prompt (one of `prefixes`; none when 0) plus its own question, with
// Poisson arrivals at `request_rate` (seeded), optionally in bursts of `burst`
// requests arriving together (the bursts' instants are Poisson at rate / burst).
// Prefix choice: prefix 0 with probability `dominant_share`, else uniform over all
// `prefixes` (so dominant_share 0 is uniform). Question and output lengths are
// uniform in [mean/2, 3·mean/2].
struct SyntheticOptions {
  size_t requests = 2000;
  size_t prefixes = 64;
  double dominant_share = 0.0;
  uint32_t system_tokens = 2048;
  uint32_t question_tokens = 512;
  uint32_t output_tokens = 256;
  double request_rate = 4.0;
  size_t burst = 1;
  uint64_t seed = 3;
};
Workload SyntheticWorkload(const SyntheticOptions& options);

// Gives each request `images_per_request` images drawn from `distinct_images` keys
// (seeded), so repeats of an image can be routed to the same engine.
void AttachImages(Workload& workload, size_t images_per_request, size_t distinct_images,
                  uint64_t seed);

}  // namespace infera::sim
