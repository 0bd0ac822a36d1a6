#include "sim/engine_flags.h"

namespace infera::sim {

void AddEngineFlags(CLI::App& app, EngineConfig& c) {
  app.add_option("--block-size", c.block_size, "tokens per KV block")->check(CLI::Range(1, 4096));
  app.add_option("--num-gpu-blocks", c.num_gpu_blocks, "KV cache size in blocks")
      ->check(CLI::Range(1, 1 << 26));
  app.add_option("--max-num-seqs", c.max_num_seqs, "max running sequences")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-num-batched-tokens", c.max_num_batched_tokens, "token budget per step")
      ->check(CLI::Range(1, 1 << 24));
  app.add_flag("!--no-prefix-caching", c.enable_prefix_caching, "disable prefix caching");
  app.add_option("--speedup", c.timing.speedup, "divide every step time by this")
      ->check(CLI::PositiveNumber);
  app.add_option("--prefill-a2", c.timing.prefill_a2, "prefill ms: a2·x²");
  app.add_option("--prefill-a1", c.timing.prefill_a1, "prefill ms: a1·x");
  app.add_option("--prefill-a0", c.timing.prefill_a0, "prefill ms: a0");
  app.add_option("--decode-b2", c.timing.decode_b2, "decode ms: b2·p²");
  app.add_option("--decode-b1", c.timing.decode_b1, "decode ms: b1·p");
  app.add_option("--decode-b0", c.timing.decode_b0, "decode ms: b0");
  app.add_option("--min-decode-ms", c.timing.min_decode_ms, "decode step floor");
  app.add_option("--engine-hash-seed", c.hash_seed, "seed of the engine's own block hash");
}

}  // namespace infera::sim
