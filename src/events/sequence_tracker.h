// SequenceTracker: classifies each publisher sequence number against the last one
// applied (doc/kv-events.md "Sequence tracking").
//
//   no batch applied yet:  seq 0 -> kNext (the stream from its start); else kFirst
//   seq == last + 1        -> kNext
//   seq >  last + 1        -> kGap (batches last+1 .. seq-1 are missing)
//   seq == 0, last >= 0    -> kRestart (a new publisher counts from 0 again)
//   otherwise              -> kDuplicate (already applied; dropped)
//
// Thread-safety: a plain value, owned by one ingestion thread.
#pragma once

#include <cstdint>
#include <optional>

namespace infera::events {

class SequenceTracker {
 public:
  enum class Class : uint8_t { kNext, kFirst, kGap, kRestart, kDuplicate };

  Class Classify(uint64_t seq) const {
    if (!last_) return seq == 0 ? Class::kNext : Class::kFirst;
    if (seq == *last_ + 1) return Class::kNext;
    if (seq > *last_ + 1) return Class::kGap;
    if (seq == 0) return Class::kRestart;
    return Class::kDuplicate;
  }
  // Whether `seq` follows directly (or starts the stream when nothing was applied).
  bool IsNext(uint64_t seq) const { return last_ ? seq == *last_ + 1 : seq == 0; }
  bool AlreadyApplied(uint64_t seq) const { return last_ && seq <= *last_; }
  void Advance(uint64_t seq) { last_ = seq; }
  void Reset() { last_.reset(); }
  std::optional<uint64_t> last() const { return last_; }

 private:
  std::optional<uint64_t> last_;
};

}  // namespace infera::events
