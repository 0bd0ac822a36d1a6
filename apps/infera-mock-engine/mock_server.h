// MockServer: the OpenAI-compatible HTTP surface of infera-mock-engine
// (doc/sim.md, "infera-mock-engine").
//
//   POST /v1/completions        prompt: string, token-id array, or a one-element list of either
//   POST /v1/chat/completions   messages rendered + tokenized by PromptTokenizer
//        both: max_tokens (or max_completion_tokens, default 16), stream,
//        stream_options.include_usage; usage carries
//        prompt_tokens_details.cached_tokens (as vLLM reports it). cache_salt (a
//        non-empty string, else 400 as vLLM) enters the first block's hash; a `model`
//        naming one of --lora-modules is a LoRA request: the adapter enters every
//        block's hash (as vLLM's kv_cache_utils does). The DP rank is the
//        X-Data-Parallel-Rank header or the body's data_parallel_rank, else the
//        least loaded rank; a rank that is not a number, or not below --dp-size, is 400.
//   POST /tokenize              vLLM: {"prompt": "..."} or {"messages": [...], ...};
//                               SGLang (--engine sglang): {"prompt": "..."} only
//                               (tokenize_handler.h)
//                               -> {"tokens": [...], "count": N, "max_model_len": L}
//   GET  /v1/models, /health, /metrics
//   GET  /debug/kv-blocks       EngineRunner::DebugDump()
//   GET  /debug/requests        the last 64 generation requests received:
//                               [{"path", "body", "data_parallel_rank_header"}], oldest first
//   PD roles (--role prefill|decode --pd-protocol P): PdRole (pd_role.h)
//   POST /reset_prefix_cache    AllBlocksCleared on every rank
// Errors use the OpenAI shape {"error": {"message", "type", "code"}}.
//
// Faults (tests): fail a fraction of generation requests with 500; exit the
// process after serving N generation requests.
//
// Thread-safety: Handle() runs on the server's loop threads concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine_runner.h"
#include "http/server.h"
#include "pd_role.h"
#include "prompt_tokenizer.h"

namespace infera::mock {

struct MockServerOptions {
  std::string model_name = "mock-model";
  double fail_fraction = 0;
  uint64_t die_after_requests = 0;  // 0: never
  uint64_t seed = 1;
  size_t max_model_len = 131072;
  bool sglang = false;                    // --engine sglang: /tokenize in SGLang's shape
  std::vector<std::string> lora_modules;  // --lora-modules: adapter names, ids 1, 2, ...
};

class MockServer {
 public:
  MockServer(EngineRunner& runner, const PromptTokenizer& tokenizer, MockServerOptions options);

  http::Awaitable<void> Handle(http::Request& request, http::ResponseWriter& writer);
  // PD role of this worker (nullptr: a plain mixed worker). Must outlive the server.
  void set_pd(PdRole* pd) { pd_ = pd; }

 private:
  http::Awaitable<void> Generate(http::Request& request, http::ResponseWriter& writer, bool chat);
  http::Awaitable<void> Tokenize(http::Request& request, http::ResponseWriter& writer);
  bool ShouldFail();

  EngineRunner& runner_;
  const PromptTokenizer& tokenizer_;
  MockServerOptions options_;
  std::mutex rng_mu_;
  core::Random rng_;
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> next_id_{1};
  PdRole* pd_ = nullptr;
  std::mutex recent_mu_;
  std::deque<nlohmann::json> recent_;  // guarded by recent_mu_
};

}  // namespace infera::mock
