#include "core/admission_queue.h"

#include <algorithm>
#include <cassert>

namespace infera::core {

const char* AdmissionName(Admission a) {
  switch (a) {
    case Admission::kBindNow:
      return "bind-now";
    case Admission::kQueued:
      return "queued";
    case Admission::kRejected:
      return "rejected";
  }
  return "rejected";
}

AdmissionQueue::AdmissionQueue(const QueueConfig& config) : config_(config) {}

Admission AdmissionQueue::Offer(uint64_t id, std::string_view tenant, int priority, int64_t now_ns,
                                bool must_wait) {
  assert(!waiting_.contains(id));
  if (waiting_.empty() && !must_wait) {
    ++stats_.bound_now;
    return Admission::kBindNow;
  }
  if (waiting_.size() >= config_.max_queued) {
    ++stats_.rejected_full;
    return Admission::kRejected;
  }
  Entry e{.tenant = std::string(tenant), .priority = priority, .arrival_ns = now_ns};
  Level& level = levels_[priority];
  std::deque<uint64_t>& fifo = level.fifo[e.tenant];
  if (fifo.empty()) level.turn.push_back(e.tenant);
  fifo.push_back(id);
  by_arrival_.push_back(id);
  waiting_.emplace(id, std::move(e));
  ++stats_.queued;
  return Admission::kQueued;
}

std::optional<uint64_t> AdmissionQueue::PopNext(int64_t now_ns) {
  if (waiting_.empty()) return std::nullopt;
  Level& level = levels_.begin()->second;  // non-empty levels only are kept
  const std::string tenant = level.turn.front();
  const uint64_t id = level.fifo[tenant].front();
  const Entry e = waiting_.at(id);
  Remove(id, e);
  // The tenant goes to the back of the turn if it still waits (Remove dropped it from
  // the front).
  ++stats_.released;
  const int64_t waited = std::max<int64_t>(0, now_ns - e.arrival_ns);
  stats_.total_wait_ns += waited;
  stats_.max_wait_ns = std::max(stats_.max_wait_ns, waited);
  return id;
}

void AdmissionQueue::Remove(uint64_t id, const Entry& e) {
  auto lit = levels_.find(e.priority);
  assert(lit != levels_.end());
  Level& level = lit->second;
  auto fit = level.fifo.find(e.tenant);
  assert(fit != level.fifo.end());
  std::deque<uint64_t>& fifo = fit->second;
  const bool was_front = !fifo.empty() && fifo.front() == id;
  fifo.erase(std::find(fifo.begin(), fifo.end(), id));
  const bool tenant_turn = !level.turn.empty() && level.turn.front() == e.tenant;
  if (fifo.empty()) {
    level.fifo.erase(fit);
    level.turn.erase(std::find(level.turn.begin(), level.turn.end(), e.tenant));
  } else if (was_front && tenant_turn) {
    // Its turn is used: the next tenant goes first.
    level.turn.pop_front();
    level.turn.push_back(e.tenant);
  }
  if (level.fifo.empty()) levels_.erase(lit);
  waiting_.erase(id);
}

bool AdmissionQueue::Cancel(uint64_t id) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return false;
  const Entry e = it->second;
  // A cancelled request does not use its tenant's turn: remove it without rotating.
  Level& level = levels_.at(e.priority);
  std::deque<uint64_t>& fifo = level.fifo.at(e.tenant);
  fifo.erase(std::find(fifo.begin(), fifo.end(), id));
  if (fifo.empty()) {
    level.fifo.erase(e.tenant);
    level.turn.erase(std::find(level.turn.begin(), level.turn.end(), e.tenant));
    if (level.fifo.empty()) levels_.erase(e.priority);
  }
  waiting_.erase(it);
  ++stats_.cancelled;
  return true;
}

std::vector<uint64_t> AdmissionQueue::Expire(int64_t now_ns) {
  std::vector<uint64_t> out;
  if (config_.max_wait_ns <= 0) return out;
  while (!by_arrival_.empty()) {
    const uint64_t id = by_arrival_.front();
    auto it = waiting_.find(id);
    if (it == waiting_.end()) {  // released or cancelled already
      by_arrival_.pop_front();
      continue;
    }
    if (now_ns - it->second.arrival_ns < config_.max_wait_ns) break;
    by_arrival_.pop_front();
    const bool cancelled = Cancel(id);
    assert(cancelled);
    (void)cancelled;
    --stats_.cancelled;
    ++stats_.expired;
    out.push_back(id);
  }
  // Keep the arrival list from growing with released ids.
  if (by_arrival_.size() > 2 * waiting_.size() + 64) {
    std::erase_if(by_arrival_, [&](uint64_t id) { return !waiting_.contains(id); });
  }
  return out;
}

std::optional<int64_t> AdmissionQueue::OldestArrival() const {
  std::optional<int64_t> oldest;
  for (const auto& [id, e] : waiting_) {
    if (!oldest || e.arrival_ns < *oldest) oldest = e.arrival_ns;
  }
  return oldest;
}

int64_t AdmissionQueue::RetryAfterSeconds(int64_t now_ns) const {
  const std::optional<int64_t> oldest = OldestArrival();
  if (!oldest) return 1;
  const int64_t waited = std::max<int64_t>(0, now_ns - *oldest);
  return std::max<int64_t>(1, (waited + 999'999'999) / 1'000'000'000);
}

size_t AdmissionQueue::TenantsWaiting() const {
  size_t n = 0;
  for (const auto& [priority, level] : levels_) n += level.fifo.size();
  return n;
}

}  // namespace infera::core
