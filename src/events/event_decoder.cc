#include "events/event_decoder.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <string>

#include "core/hashing.h"
#include "event_wire/msgpack_reader.h"

namespace infera::events {
namespace {

constexpr uint64_t kMaxBlockSize = 1u << 20;

// Event fields, named as in vLLM's structs. Array events list them in this order
// after the tag (BlockStored: all; BlockRemoved: kBlockHashes, kMedium, kGroupIdx).
enum class Field : uint8_t {
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kSlidingWindow,
  kUnknown,
};

constexpr std::array<Field, 11> kStoredOrder = {
    Field::kBlockHashes, Field::kParentBlockHash, Field::kTokenIds,     Field::kBlockSize,
    Field::kLoraId,      Field::kMedium,          Field::kLoraName,     Field::kExtraKeys,
    Field::kGroupIdx,    Field::kSpecKind,        Field::kSlidingWindow};
constexpr std::array<Field, 3> kRemovedOrder = {Field::kBlockHashes, Field::kMedium,
                                                Field::kGroupIdx};

Field FieldByName(std::string_view name) {
  if (name == "block_hashes") return Field::kBlockHashes;
  if (name == "parent_block_hash") return Field::kParentBlockHash;
  if (name == "token_ids") return Field::kTokenIds;
  if (name == "block_size") return Field::kBlockSize;
  if (name == "lora_id") return Field::kLoraId;
  if (name == "medium") return Field::kMedium;
  if (name == "lora_name") return Field::kLoraName;
  if (name == "extra_keys") return Field::kExtraKeys;
  if (name == "group_idx") return Field::kGroupIdx;
  if (name == "kv_cache_spec_kind") return Field::kSpecKind;
  if (name == "kv_cache_spec_sliding_window") return Field::kSlidingWindow;
  return Field::kUnknown;
}

bool TypeByTag(std::string_view tag, EventType& out) {
  if (tag == "BlockStored") {
    out = EventType::kStored;
  } else if (tag == "BlockRemoved") {
    out = EventType::kRemoved;
  } else if (tag == "AllBlocksCleared") {
    out = EventType::kCleared;
  } else {
    return false;
  }
  return true;
}

class Decoder {
 public:
  Decoder(std::span<const uint8_t> payload, DecodedBatch& out) : r_(payload), out_(out) {}

  absl::Status Run() {
    if (r_.remaining() > kMaxPayloadBytes) return Error("payload too large");
    out_.Clear();
    switch (r_.Peek()) {
      case MsgpackType::kArray:
        if (!ArrayBatch()) return Failure();
        break;
      case MsgpackType::kMap:
        if (!MapBatch()) return Failure();
        break;
      default:
        return Error("batch is neither an array nor a map");
    }
    if (!r_.AtEnd()) return Error("trailing bytes after the batch");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(std::string_view what) {
    return absl::InvalidArgumentError("kv event batch: " + std::string(what) + " (at byte " +
                                      std::to_string(r_.position()) + ")");
  }
  absl::Status Failure() { return Error(error_.empty() ? "malformed msgpack" : error_); }
  bool Bad(std::string_view what) {
    if (error_.empty()) error_ = std::string(what);
    return false;
  }

  bool ReadTs() {
    if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
    return r_.ReadNumber(out_.ts) || Bad("ts is not a number");
  }
  bool ReadDpRank() {
    if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
    int64_t rank;
    if (!r_.ReadInt(rank)) return Bad("dp rank is not an integer");
    out_.dp_rank = rank;
    return true;
  }

  bool ArrayBatch() {
    uint32_t n;
    if (!r_.ReadArrayHeader(n)) return false;
    if (n < 2) return Bad("batch array has fewer than 2 fields");
    if (!ReadTs() || !Events()) return false;
    if (n >= 3 && !ReadDpRank()) return false;
    for (uint32_t i = 3; i < n; ++i) {
      if (!r_.Skip()) return false;
    }
    return true;
  }

  bool MapBatch() {
    uint32_t n;
    if (!r_.ReadMapHeader(n)) return false;
    bool have_events = false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view key;
      if (!r_.ReadStr(key)) return Bad("batch map key is not a string");
      if (key == "ts") {
        if (!ReadTs()) return false;
      } else if (key == "events") {
        if (have_events) return Bad("duplicate events");
        have_events = true;
        if (!Events()) return false;
      } else if (key == "data_parallel_rank" || key == "attn_dp_rank") {
        if (!ReadDpRank()) return false;
      } else if (!r_.Skip()) {
        return false;
      }
    }
    return have_events || Bad("batch map has no events");
  }

  bool Events() {
    uint32_t n;
    if (!r_.ReadArrayHeader(n)) return Bad("events is not an array");
    out_.events.reserve(out_.events.size() + n);
    for (uint32_t i = 0; i < n; ++i) {
      if (!Event()) return false;
    }
    return true;
  }

  bool Event() {
    DecodedEvent e;
    e.hash_begin = static_cast<uint32_t>(out_.hashes.size());
    e.token_begin = static_cast<uint32_t>(out_.tokens.size());
    seen_ = 0;
    const MsgpackType t = r_.Peek();
    if (t == MsgpackType::kArray) {
      uint32_t n;
      if (!r_.ReadArrayHeader(n)) return false;
      if (n == 0) return Bad("empty event array");
      std::string_view tag;
      if (!r_.ReadStr(tag)) return Bad("event tag is not a string");
      if (!TypeByTag(tag, e.type)) return Bad("unknown event tag '" + std::string(tag) + "'");
      std::span<const Field> order;
      if (e.type == EventType::kStored) order = kStoredOrder;
      if (e.type == EventType::kRemoved) order = kRemovedOrder;
      for (uint32_t i = 1; i < n; ++i) {
        const Field f = i - 1 < order.size() ? order[i - 1] : Field::kUnknown;
        if (!EventField(f, e)) return false;
      }
    } else if (t == MsgpackType::kMap) {
      uint32_t n;
      if (!r_.ReadMapHeader(n)) return false;
      bool have_type = false;
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view key;
        if (!r_.ReadStr(key)) return Bad("event map key is not a string");
        if (key == "type") {
          std::string_view tag;
          if (have_type) return Bad("duplicate event type");
          if (!r_.ReadStr(tag)) return Bad("event type is not a string");
          if (!TypeByTag(tag, e.type)) return Bad("unknown event type '" + std::string(tag) + "'");
          have_type = true;
        } else if (!EventField(FieldByName(key), e)) {
          return false;
        }
      }
      if (!have_type) return Bad("event map has no type");
    } else {
      return Bad("event is neither an array nor a map");
    }
    if (!Validate(e)) return false;
    e.hash_count = static_cast<uint32_t>(out_.hashes.size() - e.hash_begin);
    e.token_count = static_cast<uint32_t>(out_.tokens.size() - e.token_begin);
    out_.events.push_back(e);
    return true;
  }

  bool Validate(DecodedEvent& e) {
    auto has = [&](Field f) { return (seen_ & (1u << static_cast<int>(f))) != 0; };
    switch (e.type) {
      case EventType::kStored:
        if (!has(Field::kBlockHashes) || !has(Field::kTokenIds)) {
          return Bad("BlockStored without block_hashes or token_ids");
        }
        if (e.block_size == 0 && has(Field::kBlockSize)) return Bad("block_size is 0");
        break;
      case EventType::kRemoved:
        if (!has(Field::kBlockHashes)) return Bad("BlockRemoved without block_hashes");
        if (has(Field::kTokenIds) || has(Field::kParentBlockHash)) {
          return Bad("BlockRemoved with BlockStored fields");
        }
        break;
      case EventType::kCleared:
        if (has(Field::kBlockHashes) || has(Field::kTokenIds)) {
          return Bad("AllBlocksCleared with block fields");
        }
        break;
    }
    return true;
  }

  bool Hash(uint64_t& out) {
    switch (r_.Peek()) {
      case MsgpackType::kUint:
      case MsgpackType::kInt:
        return r_.ReadInt64Bits(out);
      case MsgpackType::kBin:
      case MsgpackType::kStr: {
        std::span<const uint8_t> bytes;
        if (!r_.ReadBytes(bytes)) return false;
        if (bytes.empty()) return Bad("empty block hash");
        out = HashFromBytes(bytes);
        return true;
      }
      default:
        return Bad("block hash is neither an integer nor bytes");
    }
  }

  bool Token(uint32_t& out) {
    uint64_t v = 0;
    if (r_.Peek() == MsgpackType::kArray) {
      // EAGLE/MTP bigram: [token, next_token]; the first is the block's token.
      uint32_t n;
      if (!r_.ReadArrayHeader(n)) return false;
      if (n == 0) return Bad("empty token pair");
      if (!r_.ReadUint(v)) return Bad("token id is not a non-negative integer");
      for (uint32_t i = 1; i < n; ++i) {
        if (!r_.Skip()) return false;
      }
    } else if (!r_.ReadUint(v)) {
      return Bad("token id is not a non-negative integer");
    }
    if (v > std::numeric_limits<uint32_t>::max()) return Bad("token id above 2^32");
    out = static_cast<uint32_t>(v);
    return true;
  }

  bool OptionalStr(std::string_view& out, bool& present) {
    present = false;
    if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
    if (!r_.ReadStr(out)) return Bad("expected a string or nil");
    present = true;
    return true;
  }

  bool EventField(Field f, DecodedEvent& e) {
    if (f != Field::kUnknown) {
      const uint32_t bit = 1u << static_cast<int>(f);
      if (seen_ & bit) return Bad("duplicate event field");
      seen_ |= bit;
    }
    switch (f) {
      case Field::kBlockHashes: {
        uint32_t n;
        if (!r_.ReadArrayHeader(n)) return Bad("block_hashes is not an array");
        const size_t base = out_.hashes.size();
        out_.hashes.resize(base + n);
        for (uint32_t i = 0; i < n; ++i) {
          if (!Hash(out_.hashes[base + i])) return false;
        }
        return true;
      }
      case Field::kParentBlockHash:
        if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
        e.has_parent = true;
        return Hash(e.parent_hash);
      case Field::kTokenIds: {
        uint32_t n;
        if (!r_.ReadArrayHeader(n)) return Bad("token_ids is not an array");
        // Geometric growth: an exact reserve per event copied the whole array again for
        // every event (1,100 events of 16,000 tokens: ~40 GB of copying, minutes).
        // (n is bounded by the bytes left: ReadArrayHeader checks it.)
        if (out_.tokens.size() + n > out_.tokens.capacity()) {
          out_.tokens.reserve(std::max(out_.tokens.size() + n, 2 * out_.tokens.capacity()));
        }
        const size_t base = out_.tokens.size();
        out_.tokens.resize(base + n);
        core::TokenId* tokens = out_.tokens.data() + base;
        for (uint32_t i = 0; i < n; ++i) {
          if (!Token(tokens[i])) return false;
        }
        return true;
      }
      case Field::kBlockSize: {
        uint64_t bs;
        if (!r_.ReadUint(bs)) return Bad("block_size is not a non-negative integer");
        if (bs > kMaxBlockSize) return Bad("block_size too large");
        e.block_size = static_cast<uint32_t>(bs);
        return true;
      }
      case Field::kLoraId: {
        if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
        int64_t id;
        if (!r_.ReadInt(id)) return Bad("lora_id is not an integer");
        e.lora_id = id;
        return true;
      }
      case Field::kMedium: {
        std::string_view medium;
        bool present;
        if (!OptionalStr(medium, present)) return false;
        if (present) {
          std::optional<core::Tier> tier = TierFromMedium(medium);
          if (tier) {
            e.tier = *tier;
          } else {
            e.usable = false;  // a tier we do not model: never count it as a hit
          }
        }
        return true;
      }
      case Field::kGroupIdx: {
        if (r_.Peek() == MsgpackType::kNil) return r_.ReadNil();
        if (!r_.ReadInt(e.group_idx)) return Bad("group_idx is not an integer");
        e.has_group_idx = true;
        return true;
      }
      case Field::kSpecKind: {
        std::string_view kind;
        bool present;
        if (!OptionalStr(kind, present)) return false;
        if (present) {
          e.has_spec_kind = true;
          if (!IsPrefixKvKind(kind)) e.usable = false;
        }
        return true;
      }
      case Field::kLoraName: {
        const MsgpackType type = r_.Peek();
        if (type == MsgpackType::kNil) return r_.ReadNil();
        if (type != MsgpackType::kStr) {
          e.lora_name_malformed = true;  // unattributable (applier), not a bad batch
          return r_.Skip();
        }
        std::string_view name;
        if (!r_.ReadStr(name)) return false;
        e.has_lora_name = true;
        e.lora_name_key = core::KeyDigest(name);
        return true;
      }
      case Field::kExtraKeys:
        return ExtraKeys(e.extra_keys);
      case Field::kSlidingWindow:
      case Field::kUnknown:
        return r_.Skip();
    }
    return Bad("unreachable field");
  }

  // extra_keys: nil | array of (nil | array of items); summarised as it is read.
  bool ExtraKeys(ExtraKeysSummary& x) {
    const MsgpackType type = r_.Peek();
    if (type == MsgpackType::kNil) return r_.ReadNil();
    x.present = true;
    if (type != MsgpackType::kArray) {
      x.malformed = true;
      return r_.Skip();
    }
    uint32_t n;
    if (!r_.ReadArrayHeader(n)) return false;
    x.entries = n;
    for (uint32_t j = 0; j < n; ++j) {
      uint32_t strings = 0;
      bool other = false;
      uint64_t first = 0, last = 0;
      const MsgpackType entry = r_.Peek();
      if (entry == MsgpackType::kNil) {
        if (!r_.ReadNil()) return false;
      } else if (entry != MsgpackType::kArray) {
        x.malformed = true;
        if (!r_.Skip()) return false;
      } else {
        uint32_t items;
        if (!r_.ReadArrayHeader(items)) return false;
        for (uint32_t k = 0; k < items; ++k) {
          if (r_.Peek() != MsgpackType::kStr) {
            other = true;  // a multimodal tuple, embedding bytes, ...
            if (!r_.Skip()) return false;
            continue;
          }
          std::string_view item;
          if (!r_.ReadStr(item)) return false;
          last = core::KeyDigest(item);
          if (strings++ == 0) first = last;
        }
      }
      if (j == 0) {
        x.first_strings = static_cast<uint8_t>(strings < 255 ? strings : 255);
        x.first_other = other;
        x.first_key = first;
        x.last_key = last;
      } else if (other || strings >= 2) {
        if (x.irregular == ExtraKeysSummary::kNone) x.irregular = j;
      } else if (strings == 0) {
        if (x.empty == ExtraKeysSummary::kNone) x.empty = j;
      } else if (x.single == ExtraKeysSummary::kNone) {
        x.single = j;
        x.single_key = first;
      } else if (first != x.single_key && x.single_mismatch == ExtraKeysSummary::kNone) {
        x.single_mismatch = j;
      }
    }
    return true;
  }

  MsgpackReader r_;
  DecodedBatch& out_;
  uint32_t seen_ = 0;  // bit per Field seen in the current event
  std::string error_;
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status DecodeEventBatch(std::span<const uint8_t> payload, DecodedBatch& out) {
  return Decoder(payload, out).Run();
}

std::optional<core::Tier> TierFromMedium(std::string_view medium) {
  for (std::string_view m : {"GPU"}) {
    if (EqualsIgnoreCase(medium, m)) return core::Tier::kDevice;
  }
  for (std::string_view m : {"CPU", "CPU_PINNED", "CPU_TIER1"}) {
    if (EqualsIgnoreCase(medium, m)) return core::Tier::kHost;
  }
  for (std::string_view m : {"CPU_TIER2", "DISK", "NVME"}) {
    if (EqualsIgnoreCase(medium, m)) return core::Tier::kDisk;
  }
  return std::nullopt;
}

bool IsPrefixKvKind(std::string_view kind) {
  return kind == "full_attention" || kind == "mla_attention" || kind == "sink_full_attention";
}

core::BlockHash HashFromBytes(std::span<const uint8_t> bytes) {
  const size_t n = bytes.size() < 8 ? bytes.size() : 8;
  uint64_t v = 0;
  for (size_t i = bytes.size() - n; i < bytes.size(); ++i) v = (v << 8) | bytes[i];
  return v;
}

}  // namespace infera::events
