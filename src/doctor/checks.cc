#include "doctor/checks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/clock.h"

namespace infera::doctor {

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kSkip:
      return "skip";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

bool AnyFailed(std::span<const CheckResult> results) {
  return std::any_of(results.begin(), results.end(),
                     [](const CheckResult& r) { return r.verdict == Verdict::kFail; });
}

std::string FormatReport(std::span<const CheckResult> results) {
  std::string out;
  std::string current = "\x01";  // no group printed yet
  std::map<Verdict, int> counts;
  char line[256];
  for (const CheckResult& r : results) {
    if (r.worker_id != current) {
      current = r.worker_id;
      out += current.empty() ? "router\n" : "worker " + current + "\n";
    }
    ++counts[r.verdict];
    std::snprintf(line, sizeof line, "  %-5s %-16s ", VerdictName(r.verdict), r.check.c_str());
    out += line + r.detail + "\n";
    if (!r.cause.empty()) out += "        cause: " + r.cause + "\n";
    if (!r.fix.empty()) out += "        fix:   " + r.fix + "\n";
  }
  std::snprintf(line, sizeof line, "%zu checks: %d ok, %d failed, %d warnings, %d skipped\n",
                results.size(), counts[Verdict::kOk], counts[Verdict::kFail],
                counts[Verdict::kWarn], counts[Verdict::kSkip]);
  return out + line;
}

ProbePrompt MakeProbePrompt(uint64_t nonce_seed) {
  ProbePrompt p;
  p.tokens.reserve(kFixedTokens + kNonceTokens + 1);
  core::Random fixed(0x0d0c7012ULL);  // the same ids in every run and every build
  for (size_t i = 0; i < kFixedTokens; ++i) {
    p.tokens.push_back(kMinTokenId + static_cast<core::TokenId>(fixed.Uniform(kTokenIdSpan)));
  }
  core::Random nonce(nonce_seed);
  for (size_t i = 0; i <= kNonceTokens; ++i) {
    p.tokens.push_back(kMinTokenId + static_cast<core::TokenId>(nonce.Uniform(kTokenIdSpan)));
  }
  return p;
}

std::string ProbeCompletionBody(const ProbePrompt& probe, std::string_view model) {
  nlohmann::json body = {{"prompt", probe.tokens}, {"max_tokens", 1}, {"stream", false}};
  if (!model.empty()) body["model"] = model;
  return body.dump();
}

void AddSighting(const ProbePrompt& probe, const StoredEvent& event, ProbeSighting& seen) {
  ++seen.stored_events;
  const size_t n = event.tokens.size();
  const size_t blocks = event.hashes.size();
  if (n == 0 || blocks == 0 || n % blocks != 0 || n > probe.tokens.size()) return;
  const size_t bs = event.block_size > 0 ? event.block_size : n / blocks;
  if (bs * blocks != n) return;
  const std::span<const core::TokenId> all(probe.tokens);
  for (size_t offset = 0; offset + n <= all.size(); offset += bs) {
    if (!std::equal(event.tokens.begin(), event.tokens.end(), all.begin() + offset)) continue;
    seen.located = true;
    seen.block_size = static_cast<uint32_t>(bs);
    if (offset + n > kFixedTokens) seen.nonce_seen = true;
    // Hash of the block ending at kFixedTokens: inside the event, or its parent.
    if (offset == kFixedTokens && event.parent) seen.fingerprint = *event.parent;
    if (kFixedTokens > offset && (kFixedTokens - offset) % bs == 0 && kFixedTokens - offset <= n) {
      seen.fingerprint = event.hashes[(kFixedTokens - offset) / bs - 1];
    }
    return;
  }
}

namespace {

std::string Hex(core::BlockHash h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string HashSeedFix(const std::string& engine) {
  if (engine == "sglang") {
    return "start SGLang with PYTHONHASHSEED=0 in its environment, the same on every start";
  }
  return "start vLLM with PYTHONHASHSEED=0 in its environment (`PYTHONHASHSEED=0 vllm serve "
         "...`; Kubernetes: env PYTHONHASHSEED \"0\") and the same --prefix-caching-hash-algo "
         "on every start (infera-mock-engine: a fixed --engine-hash-seed, no "
         "--unstable-hash-seed)";
}

}  // namespace

CheckResult CompareFingerprint(const std::string& worker_id, const std::string& engine,
                               const std::optional<Fingerprint>& recorded, const Fingerprint& now) {
  CheckResult r{worker_id, "hash-stability", Verdict::kSkip, "", "", ""};
  const std::string seen = Hex(now.hash) + " (seq " + std::to_string(now.seq) + ")";
  if (!recorded) {
    r.detail = "fingerprint " + seen +
               " recorded; restart the engine and run the doctor again with the same "
               "--fingerprints file to see whether its block hashes survive a restart";
    return r;
  }
  if (recorded->block_size != now.block_size) {
    r.detail = "block size changed (" + std::to_string(recorded->block_size) + " -> " +
               std::to_string(now.block_size) + "): new fingerprint " + seen + " recorded";
    return r;
  }
  const std::string before = Hex(recorded->hash) + " (seq " + std::to_string(recorded->seq) + ", " +
                             recorded->recorded_at + ")";
  if (recorded->hash != now.hash) {
    r.verdict = Verdict::kFail;
    r.detail =
        "the engine hashes the same tokens differently than before: " + before + " -> " + seen;
    r.cause =
        "the engine seeds its block hashes at random at every start (vLLM without "
        "PYTHONHASHSEED draws NONE_HASH from os.urandom): its prefix-cache keys change with "
        "each restart, so KV kept or shared by hash (CPU/disk offload, LMCache, PD transfer) "
        "is never found again and cross-restart prefix hits are zero";
    r.fix = HashSeedFix(engine);
    return r;
  }
  // Every probe publishes at least one batch: without a restart the seq only grows.
  if (now.seq <= recorded->seq) {
    r.verdict = Verdict::kOk;
    r.detail = "unchanged across a restart of the engine: " + before + " -> " + seen;
    return r;
  }
  r.detail = "unchanged, but the engine has not restarted since " + before +
             " (its event seq grew): stability across a restart not shown yet";
  return r;
}

std::string BlockSizeFlag(std::string_view engine, uint32_t block_size) {
  const std::string n = std::to_string(block_size);
  if (engine == "sglang") return "SGLang --page-size " + n;
  return "vLLM --block-size " + n + " (infera-mock-engine --block-size " + n + ")";
}

std::string KvEventsFlag(std::string_view engine, std::string_view endpoint_hint) {
  std::string port = "5557";
  if (const size_t colon = endpoint_hint.rfind(':');
      colon != std::string_view::npos && colon + 1 < endpoint_hint.size()) {
    port = std::string(endpoint_hint.substr(colon + 1));
  }
  if (engine == "sglang") {
    return "SGLang --kv-events-config '{\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:" + port +
           "\", \"topic\": \"kv-events\"}'";
  }
  return "vLLM --enable-prefix-caching --kv-events-config '{\"enable_kv_cache_events\": true, "
         "\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:" +
         port +
         "\", \"topic\": \"kv-events\"}' (infera-mock-engine --kv-events-endpoint tcp://*:" + port +
         ")";
}

}  // namespace infera::doctor
