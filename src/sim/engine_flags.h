// Command-line flags of the engine model, shared by infera-mock-engine and
// infera-bench so both spell them the same way:
//   --block-size --num-gpu-blocks --max-num-seqs --max-num-batched-tokens
//   --no-prefix-caching --speedup --prefill-a2/--prefill-a1/--prefill-a0
//   --decode-b2/--decode-b1/--decode-b0 --min-decode-ms --engine-hash-seed
#pragma once

#include <CLI/CLI.hpp>

#include "sim/engine.h"

namespace infera::sim {

void AddEngineFlags(CLI::App& app, EngineConfig& config);

}  // namespace infera::sim
