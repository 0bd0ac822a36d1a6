// The doctor's checks, pure part (doc/operations.md "Doctor"): what a check result is,
// the probe prompt, how the probe's KV events are read, the hash-fingerprint verdicts,
// and each failure's cause and fix. No sockets, no clock: fleet_doctor.h does the I/O.
//
//   ProbePrompt probe = MakeProbePrompt(nonce_seed);   // kFixedTokens + kNonceTokens + 1 ids
//   ProbeSighting seen;
//   for (each BlockStored of the worker's stream) AddSighting(probe, event, seen);
//   if (seen.located) ... seen.block_size, seen.fingerprint ...
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace infera::doctor {

enum class Verdict : uint8_t { kOk, kSkip, kWarn, kFail };
// "ok", "skip", "warn", "FAIL".
const char* VerdictName(Verdict verdict);

// One check of one worker (or of the router itself: worker_id empty).
struct CheckResult {
  std::string worker_id;
  std::string check;  // "reachable", "model", "kv-events", "block-size", "hash-stability",
                      // "render-parity", "router-tokenizer"
  Verdict verdict = Verdict::kOk;
  std::string detail;  // what was seen
  std::string cause;   // kFail / kWarn: why this costs cache hits
  std::string fix;     // kFail / kWarn: the exact engine or router flag
};

// True when any result is kFail (the doctor's exit status is then 1).
bool AnyFailed(std::span<const CheckResult> results);
// The human report: one line per check, cause and fix indented below a failure.
std::string FormatReport(std::span<const CheckResult> results);

// ---- the probe ---------------------------------------------------------------------

// The probe is sent as /v1/completions with an integer-array prompt: a fixed part (the
// same ids in every run: its engine hash is the fingerprint), a nonce part (fresh ids
// each run: the engine must compute and store it, so a BlockStored for it follows even
// when the fixed part is still cached), and one more id so both parts are full blocks
// for every block size that divides kFixedTokens (1, 2, 4, ... 256).
inline constexpr size_t kFixedTokens = 256;
inline constexpr size_t kNonceTokens = 256;
// Ids are drawn from [kMinTokenId, kMinTokenId + kTokenIdSpan): inside the vocabulary of
// every model with 32k ids or more, above the usual special and byte tokens.
inline constexpr core::TokenId kMinTokenId = 1000;
inline constexpr core::TokenId kTokenIdSpan = 30000;

struct ProbePrompt {
  std::vector<core::TokenId> tokens;  // fixed, nonce, one more
};
ProbePrompt MakeProbePrompt(uint64_t nonce_seed);
// {"model", "prompt": [ids], "max_tokens": 1, "stream": false} (no model field when empty).
std::string ProbeCompletionBody(const ProbePrompt& probe, std::string_view model);

// One BlockStored as the decoder gives it.
struct StoredEvent {
  std::span<const core::BlockHash> hashes;  // engine hashes, one per block
  std::span<const core::TokenId> tokens;
  std::optional<core::BlockHash> parent;
  uint32_t block_size = 0;  // the event's field; 0 when absent
};

// What the events showed about the probe.
struct ProbeSighting {
  bool located = false;      // an event's tokens were found inside the probe
  bool nonce_seen = false;   // ... covering the nonce part (this run's probe)
  uint32_t block_size = 0;   // tokens per block of the located events
  size_t stored_events = 0;  // BlockStored events seen, located or not
  // Engine hash of the block ending at kFixedTokens: from a located block, or from the
  // parent hash of a located event starting there.
  std::optional<core::BlockHash> fingerprint;
};

// Places `event` inside `probe` (the offset where its tokens equal the probe's) and
// records what it shows. Events of other requests are counted, not located.
void AddSighting(const ProbePrompt& probe, const StoredEvent& event, ProbeSighting& seen);

// ---- hash stability across restarts ------------------------------------------------

// A worker's recorded fingerprint (the doctor's --fingerprints file).
struct Fingerprint {
  uint32_t block_size = 0;
  core::BlockHash hash = 0;
  uint64_t seq = 0;         // the probe batch's ZMQ seq: a publisher restarted since starts lower
  std::string recorded_at;  // ISO-8601, for the report
};

// The verdict of `now` against the recorded fingerprint (nullopt: none recorded).
CheckResult CompareFingerprint(const std::string& worker_id, const std::string& engine,
                               const std::optional<Fingerprint>& recorded, const Fingerprint& now);

// ---- causes and fixes --------------------------------------------------------------

// The flag that sets an engine's KV block size ("--block-size" vLLM, "--page-size"
// SGLang), and the engine's flag that publishes KV events, for the fixes.
std::string BlockSizeFlag(std::string_view engine, uint32_t block_size);
std::string KvEventsFlag(std::string_view engine, std::string_view endpoint_hint);

}  // namespace infera::doctor
