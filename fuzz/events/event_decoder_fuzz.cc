// libFuzzer target: the KV-event decoder and applier on arbitrary bytes. Any crash,
// sanitizer report, hang or escaping exception is a bug; a decoded batch must apply to
// an index without violating its contracts.
#include <cstddef>
#include <cstdint>

#include "core/kv_index.h"
#include "events/event_applier.h"
#include "events/event_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace infera;
  static events::DecodedBatch batch;
  if (!events::DecodeEventBatch(std::span<const uint8_t>(data, size), batch).ok()) return 0;
  // Decoded: every range must lie inside the batch's arrays.
  for (const events::DecodedEvent& e : batch.events) {
    if (e.hash_begin + static_cast<uint64_t>(e.hash_count) > batch.hashes.size()) __builtin_trap();
    if (e.token_begin + static_cast<uint64_t>(e.token_count) > batch.tokens.size()) {
      __builtin_trap();
    }
  }
  core::KvIndex index;
  const core::TargetId id = index.AddTarget({"fuzz:1", 0}, 4);
  events::TargetApplyState state;
  events::ApplyEventBatch(index, id, batch, state);
  events::ApplyEventBatch(index, id, batch, state);  // replays are idempotent-safe
  return 0;
}
