#include "engine_events/event_encoder.h"

#include <string_view>

#include "event_wire/msgpack_writer.h"

namespace infera::events {
namespace {

using Writer = MsgpackWriter;

void EncodeExtraKeys(Writer& w, const Stored& s) {
  w.Array(s.extra_keys->size());
  for (const auto& entry : *s.extra_keys) {
    if (!entry) {
      w.Nil();
      continue;
    }
    w.Array(entry->size());
    for (const std::string& key : *entry) w.Str(key);
  }
}

void EncodeMapEvent(Writer& w, const KvEvent& event) {
  if (const auto* s = std::get_if<Stored>(&event)) {
    w.Map(s->extra_keys ? 9 : 8);
    w.Str("type");
    w.Str("BlockStored");
    w.Str("block_hashes");
    w.Hashes(s->engine_hashes);
    w.Str("parent_block_hash");
    s->parent ? w.Uint(*s->parent) : w.Nil();
    w.Str("token_ids");
    w.Tokens(s->token_ids);
    w.Str("block_size");
    w.Uint(s->block_size);
    w.Str("lora_id");
    s->lora_id ? w.Int(*s->lora_id) : w.Nil();
    w.Str("medium");
    w.OptStr(s->medium);
    w.Str("lora_name");
    w.OptStr(s->lora_name);
    if (s->extra_keys) {
      w.Str("extra_keys");
      EncodeExtraKeys(w, *s);
    }
  } else if (const auto* r = std::get_if<Removed>(&event)) {
    w.Map(3);
    w.Str("type");
    w.Str("BlockRemoved");
    w.Str("block_hashes");
    w.Hashes(r->engine_hashes);
    w.Str("medium");
    w.OptStr(r->medium);
  } else {
    w.Map(1);
    w.Str("type");
    w.Str("AllBlocksCleared");
  }
}

void EncodeArrayEvent(Writer& w, const KvEvent& event, WireShape shape) {
  const bool sglang = shape == WireShape::kSglang;
  if (const auto* s = std::get_if<Stored>(&event)) {
    const bool with_medium = !sglang || s->medium.has_value();
    w.Array(sglang ? (with_medium ? 7 : 6) : (s->extra_keys ? 9 : 8));
    w.Str("BlockStored");
    w.Hashes(s->engine_hashes);
    s->parent ? w.Uint(*s->parent) : w.Nil();
    w.Tokens(s->token_ids);
    w.Uint(s->block_size);
    s->lora_id ? w.Int(*s->lora_id) : w.Nil();
    if (with_medium) w.OptStr(s->medium);
    if (!sglang) {
      w.OptStr(s->lora_name);
      if (s->extra_keys) EncodeExtraKeys(w, *s);
    }
  } else if (const auto* r = std::get_if<Removed>(&event)) {
    const bool with_medium = !sglang || r->medium.has_value();
    w.Array(with_medium ? 3 : 2);
    w.Str("BlockRemoved");
    w.Hashes(r->engine_hashes);
    if (with_medium) w.OptStr(r->medium);
  } else {
    w.Array(1);
    w.Str("AllBlocksCleared");
  }
}

}  // namespace

std::string EncodeEventBatch(const EventBatch& batch, WireShape shape) {
  std::string out;
  out.reserve(64 + batch.events.size() * 64);
  Writer w(out);
  if (shape == WireShape::kVllm) {
    w.Map(batch.dp_rank ? 3 : 2);
    w.Str("ts");
    w.Double(batch.ts);
    w.Str("events");
    w.Array(batch.events.size());
    for (const KvEvent& e : batch.events) EncodeMapEvent(w, e);
    if (batch.dp_rank) {
      w.Str("data_parallel_rank");
      w.Uint(*batch.dp_rank);
    }
    return out;
  }
  w.Array(batch.dp_rank ? 3 : 2);
  w.Double(batch.ts);
  w.Array(batch.events.size());
  for (const KvEvent& e : batch.events) EncodeArrayEvent(w, e, shape);
  if (batch.dp_rank) w.Uint(*batch.dp_rank);
  return out;
}

}  // namespace infera::events
