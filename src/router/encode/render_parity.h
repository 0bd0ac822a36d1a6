// Render parity: does a worker turn a chat into the same token ids as the router?
// (doc/render-parity.md; architecture §7, spec "Decode input-demand routing").
//
// The router renders a fixed probe conversation with its chat template and tokenizes
// it without adding special tokens (the path of every chat request), then asks the
// worker to do the same through its `/tokenize` endpoint and compares the ids:
//
//   vLLM  (engine "vllm", and any engine other than "sglang"):
//     POST /tokenize {"model", "messages", "add_generation_prompt": true,
//                     "add_special_tokens": false}       (vLLM's TokenizeChatRequest)
//   SGLang (engine "sglang"): its /tokenize takes text only, so the router sends its
//     own rendering: {"model", "prompt", "add_special_tokens": false}; this checks the
//     tokenizer, not the template.
//   Both answer {"tokens": [...], "count": N, "max_model_len": L}.
//
// Verdicts (NextParity):
//   ids equal                          -> exact
//   ids differ                         -> diverged
//   404, 405 or 501 (no /tokenize)     -> unsupported (counts as exact)
//   anything else (timeout, connection error, 5xx, other 4xx, malformed answer)
//                                      -> the previous verdict (unknown at first)
// Every verdict but `diverged` counts as exact.
//
// This file is pure (no I/O): RenderParityProber does the exchanges.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace infera::router {

enum class RenderParity : uint8_t { kUnknown, kExact, kDiverged, kUnsupported };
// "unknown", "exact", "diverged", "unsupported".
const char* RenderParityName(RenderParity parity);
// Everything but kDiverged: an unchecked worker counts as exact (spec).
inline bool CountsAsExact(RenderParity parity) { return parity != RenderParity::kDiverged; }

// What one probe showed.
enum class ProbeOutcome : uint8_t { kExact, kDiverged, kUnsupported, kError };
// "exact", "diverged", "unsupported", "error" (the probes counter's `outcome`).
const char* ProbeOutcomeName(ProbeOutcome outcome);

RenderParity NextParity(RenderParity previous, ProbeOutcome outcome);

enum class ProbeShape : uint8_t { kVllmChat, kSglangPrompt };
// kSglangPrompt for engine "sglang", else kVllmChat.
ProbeShape ProbeShapeFor(std::string_view engine);

// The router's own rendering of the probe conversation and its ids.
struct ProbeRendering {
  std::string text;
  std::vector<core::TokenId> ids;
};

// The fixed probe conversation: a JSON array of messages (system, user, assistant,
// user; non-ASCII text, digits, runs of spaces and newlines).
const std::string& ProbeMessagesJson();
// The chat body the router renders the probe from: {"messages": [...]}.
std::string ProbeChatBody();

// The /tokenize request body. `model` empty: no "model" field (the engine's default).
// `rendered`: the router's rendering of the probe (the SGLang shape sends it).
std::string ProbeRequestBody(ProbeShape shape, std::string_view model, std::string_view rendered);

// The answer's verdict against `own` ids, and in `detail` why (for the log): the
// counts and the first position that differs, or what was wrong with the answer.
ProbeOutcome ClassifyProbeAnswer(int status, std::string_view body,
                                 std::span<const core::TokenId> own, std::string* detail);

}  // namespace infera::router
