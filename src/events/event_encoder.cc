#include "events/event_encoder.h"

#include <bit>
#include <string_view>

namespace infera::events {
namespace {

// Minimal msgpack writer: always the smallest encoding, as msgspec and msgpack-python do.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void Nil() { Byte(0xc0); }
  void Uint(uint64_t v) {
    if (v <= 0x7f) {
      Byte(static_cast<uint8_t>(v));
    } else if (v <= 0xff) {
      Byte(0xcc);
      BE(v, 1);
    } else if (v <= 0xffff) {
      Byte(0xcd);
      BE(v, 2);
    } else if (v <= 0xffffffffu) {
      Byte(0xce);
      BE(v, 4);
    } else {
      Byte(0xcf);
      BE(v, 8);
    }
  }
  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    if (v >= -32) return Byte(static_cast<uint8_t>(v));
    const uint64_t bits = static_cast<uint64_t>(v);
    if (v >= INT8_MIN) {
      Byte(0xd0);
      BE(bits, 1);
    } else if (v >= INT16_MIN) {
      Byte(0xd1);
      BE(bits, 2);
    } else if (v >= INT32_MIN) {
      Byte(0xd2);
      BE(bits, 4);
    } else {
      Byte(0xd3);
      BE(bits, 8);
    }
  }
  void Double(double d) {
    Byte(0xcb);
    BE(std::bit_cast<uint64_t>(d), 8);
  }
  void Str(std::string_view s) {
    const size_t n = s.size();
    if (n <= 31) {
      Byte(static_cast<uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      Byte(0xd9);
      BE(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xda);
      BE(n, 2);
    } else {
      Byte(0xdb);
      BE(n, 4);
    }
    out_.append(s);
  }
  void Array(size_t n) { Header(n, 0x90, 0xdc, 0xdd); }
  void Map(size_t n) { Header(n, 0x80, 0xde, 0xdf); }
  void OptStr(const std::optional<std::string>& s) { s ? Str(*s) : Nil(); }
  void Hashes(const std::vector<uint64_t>& hashes) {
    Array(hashes.size());
    for (uint64_t h : hashes) Uint(h);
  }
  void Tokens(const std::vector<uint32_t>& tokens) {
    Array(tokens.size());
    for (uint32_t t : tokens) Uint(t);
  }

 private:
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void BE(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Header(size_t n, uint8_t fix, uint8_t b16, uint8_t b32) {
    if (n <= 15) {
      Byte(static_cast<uint8_t>(fix | n));
    } else if (n <= 0xffff) {
      Byte(b16);
      BE(n, 2);
    } else {
      Byte(b32);
      BE(n, 4);
    }
  }

  std::string& out_;
};

void EncodeMapEvent(Writer& w, const KvEvent& event) {
  if (const auto* s = std::get_if<Stored>(&event)) {
    w.Map(8);
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
    w.Nil();
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
    w.Array(sglang ? (with_medium ? 7 : 6) : 8);
    w.Str("BlockStored");
    w.Hashes(s->engine_hashes);
    s->parent ? w.Uint(*s->parent) : w.Nil();
    w.Tokens(s->token_ids);
    w.Uint(s->block_size);
    s->lora_id ? w.Int(*s->lora_id) : w.Nil();
    if (with_medium) w.OptStr(s->medium);
    if (!sglang) w.Nil();  // lora_name
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
