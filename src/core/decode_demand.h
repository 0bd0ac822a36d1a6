// DecodeDemand: input-token demand of in-flight requests per Decode target (spec
// "Optional Decode input-demand routing" and "Request-count weight"; architecture §10).
//
// Projected cost of a candidate for a request of `tokens` input tokens and `n`
// choices (an invalid n counts as 1):
//   cost(t) = in-flight input tokens(t) + tokens × n + W × requests held by t
// with W = --decode-request-weight (0 = token-only demand). The lowest cost wins; ties
// go to the lower original load, then to candidate order.
//
// A Reservation books tokens × n and one request on a target and releases them exactly
// once (Release() or destruction). Entries are keyed by the target's route key
// (TargetKey::ToString()) and are independent of discovery: live reservations survive
// the worker leaving, and an entry disappears only when nothing is booked on it.
//
// Keys are std::string: Debian's abseil has its own string_view, so heterogeneous lookup
// with std::string_view does not compile.
//
// Thread-safety: none; the server serialises all calls (and reservation releases) with
// its pick mutex. The DecodeDemand must outlive its reservations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace infera::core {

enum class DemandMode : uint8_t { kOff, kShadow, kOn };
// "off", "shadow", "on".
absl::StatusOr<DemandMode> ParseDemandMode(std::string_view name);
const char* DemandModeName(DemandMode mode);

class DecodeDemand {
 public:
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }
    void Release();
    bool pending() const { return owner_ != nullptr; }

   private:
    friend class DecodeDemand;
    DecodeDemand* owner_ = nullptr;
    std::string key_;
    uint64_t tokens_ = 0;
  };

  // REQUIRES: request_weight >= 0.
  explicit DecodeDemand(double request_weight = 0) : request_weight_(request_weight) {}
  DecodeDemand(const DecodeDemand&) = delete;
  DecodeDemand& operator=(const DecodeDemand&) = delete;

  // tokens × n, with n < 1 counted as 1.
  static uint64_t Demand(uint64_t tokens, int64_t n) { return tokens * (n < 1 ? 1 : n); }
  double Cost(const std::string& key, uint64_t demand) const;
  // Index of the chosen candidate. REQUIRES: !keys.empty(), loads.size() == keys.size().
  size_t Select(std::span<const std::string> keys, std::span<const double> loads,
                uint64_t demand) const;
  Reservation Reserve(const std::string& key, uint64_t demand);

  uint64_t Tokens(const std::string& key) const;
  uint64_t Requests(const std::string& key) const;
  size_t EntryCount() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t tokens = 0;
    uint64_t requests = 0;
  };
  void Release(const std::string& key, uint64_t tokens);

  double request_weight_;
  absl::flat_hash_map<std::string, Entry> entries_;
};

}  // namespace infera::core
