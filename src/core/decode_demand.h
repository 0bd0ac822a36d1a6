// DecodeDemand: input-token demand of in-flight requests per Decode target (spec
// "Optional Decode input-demand routing" and "Request-count weight"; architecture §10;
// doc/decode-demand.md).
//
// Projected cost of a candidate for a request of `tokens` input tokens and `n`
// choices (an invalid n counts as 1):
//   cost(t) = in-flight input tokens(t) + tokens × n + W × requests held by t
// where the in-flight tokens and requests include other router replicas' (SetRemote).
// with W = --decode-request-weight (0 = token-only demand). The lowest cost wins; ties
// go to the lower original load, then to candidate order.
//
// A Reservation books tokens × n and one request on a target and releases them exactly
// once (Release() or destruction). Entries are keyed by the target's route key
// (TargetKey::ToString()). An entry lives while it is booked; Forget(key) (the worker
// left discovery) detaches it: its live reservations release into the detached entry,
// and a target recreated under the same key starts from a new, empty entry, so a late
// completion never subtracts from it.
//
// Keys are std::string: Debian's abseil has its own string_view, so heterogeneous lookup
// with std::string_view does not compile.
//
// Thread-safety: none; the server serialises all calls (and reservation releases) with
// its pick mutex. The DecodeDemand must outlive its reservations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace infera::core {

enum class DemandMode : uint8_t { kOff, kShadow, kOn };
// "off", "shadow", "on".
absl::StatusOr<DemandMode> ParseDemandMode(std::string_view name);
const char* DemandModeName(DemandMode mode);

// One decode pick's demand decision, by candidate position.
struct DemandDecision {
  size_t original = 0;        // the original policy's choice
  size_t suggestion = 0;      // the lowest projected demand
  size_t chosen = 0;          // shadow: original; on: suggestion
  std::vector<double> costs;  // each candidate's projected cost
  bool agrees() const { return original == suggestion; }
};

class DecodeDemand {
 public:
  struct Entry {
    uint64_t tokens = 0;
    uint64_t requests = 0;
  };

  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }
    // Releases the booking; later calls do nothing.
    void Release();
    bool pending() const { return owner_ != nullptr; }

   private:
    friend class DecodeDemand;
    DecodeDemand* owner_ = nullptr;
    std::shared_ptr<Entry> entry_;  // the entry booked, even when detached since
    std::string key_;
    uint64_t tokens_ = 0;
  };

  // REQUIRES: request_weight >= 0.
  explicit DecodeDemand(double request_weight = 0) : request_weight_(request_weight) {}
  DecodeDemand(const DecodeDemand&) = delete;
  DecodeDemand& operator=(const DecodeDemand&) = delete;

  // tokens × n, with n < 1 counted as 1.
  static uint64_t Demand(uint64_t tokens, int64_t n) {
    return tokens * static_cast<uint64_t>(n < 1 ? 1 : n);
  }
  double Cost(const std::string& key, uint64_t demand) const;
  // Index of the chosen candidate. REQUIRES: !keys.empty(), loads.size() == keys.size().
  size_t Select(std::span<const std::string> keys, std::span<const double> loads,
                uint64_t demand) const;
  // Select plus the original choice: `chosen` is the suggestion for kOn, the original
  // otherwise. REQUIRES: as Select, original < keys.size().
  DemandDecision Decide(DemandMode mode, std::span<const std::string> keys,
                        std::span<const double> loads, uint64_t demand, size_t original) const;
  Reservation Reserve(const std::string& key, uint64_t demand);
  // The target left discovery: detach its entry (live reservations keep it).
  void Forget(const std::string& key);

  uint64_t Tokens(const std::string& key) const;
  uint64_t Requests(const std::string& key) const;
  // Other router replicas' demand on the target (--router-replica-sync,
  // doc/replica-sync.md): added to Cost(); Tokens()/Requests() stay this router's own.
  // 0, 0 forgets the key.
  void SetRemote(const std::string& key, uint64_t tokens, uint64_t requests);
  uint64_t RemoteTokens(const std::string& key) const;
  uint64_t RemoteRequests(const std::string& key) const;
  size_t EntryCount() const { return entries_.size(); }
  // Reservations not yet released, detached entries included (0 when idle).
  uint64_t LiveReservations() const { return live_; }
  double request_weight() const { return request_weight_; }

 private:
  void Release(Reservation& r);

  double request_weight_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_;
  absl::flat_hash_map<std::string, Entry> remote_;
  uint64_t live_ = 0;
};

}  // namespace infera::core
