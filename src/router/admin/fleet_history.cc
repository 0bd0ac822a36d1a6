#include "router/admin/fleet_history.h"

#include <algorithm>
#include <cstdio>

namespace infera::router {
namespace {

constexpr int64_t kNsPerSecond = 1'000'000'000;

int64_t SecondOf(int64_t ns) { return ns / kNsPerSecond; }

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Target names come from discovery: anything outside a safe set is percent-encoded,
// so a name never breaks the header's `;`, `,` and `=` structure.
std::string EncodeTarget(const std::string& name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : name) {
    const bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == ':' || c == '#' || c == '@' || c == '/' ||
                      c == '+' || c == '-';
    if (safe) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

RouteLegReceipt LegReceiptOf(const core::PickResult& pick) {
  RouteLegReceipt leg;
  leg.role = pick.role;
  leg.target = pick.picked_name;
  leg.cache_hits = pick.cache_hits;
  leg.request_blocks = pick.request_blocks;
  leg.w_overlap = pick.w_overlap;
  leg.credited = pick.credited;
  leg.load = pick.load;
  leg.cost = pick.cost;
  leg.candidates = static_cast<uint32_t>(pick.costs.size());
  // Exact on the pruned pick too (core::RunnerUpCost of the exact costs).
  leg.runner_up_cost = pick.runner_up_cost;
  return leg;
}

std::string FormatRouteReceipt(const RouteReceipt& receipt) {
  std::string out;
  for (const RouteLegReceipt& leg : receipt.legs) {
    if (!out.empty()) out += ", ";
    out += "role=";
    out += core::RoleName(leg.role);
    out += ";target=" + EncodeTarget(leg.target);
    out += ";policy=";
    out += core::PolicyName(receipt.policy);
    out += ";cache_hits=" + std::to_string(leg.cache_hits);
    out += ";request_blocks=" + std::to_string(leg.request_blocks);
    out += ";cost=" + Number(leg.cost);
    out += ";w_overlap=" + Number(leg.w_overlap);
    out += ";credited=" + Number(leg.credited);
    out += ";load=" + Number(leg.load);
    out += ";candidates=" + std::to_string(leg.candidates);
    if (leg.runner_up_cost) out += ";runner_up_cost=" + Number(*leg.runner_up_cost);
  }
  return out;
}

FleetHistory::Second& FleetHistory::At(int64_t second) {
  Second& s = seconds_[static_cast<size_t>(second) % kSeconds];
  if (s.second != second) {
    s = Second{};
    s.second = second;
    s.max_inflight = s.last_inflight = inflight_;
  }
  return s;
}

void FleetHistory::Prune(int64_t second) {
  if (second == pruned_second_) return;
  pruned_second_ = second;
  const int64_t oldest = second - static_cast<int64_t>(kTargetSeconds) + 1;
  absl::erase_if(targets_, [&](const auto& entry) {
    for (const TargetSecond& b : entry.second) {
      if (b.second >= oldest) return false;
    }
    return true;
  });
}

void FleetHistory::RecordPick(RouteReceipt receipt) {
  const int64_t second = SecondOf(receipt.at_ns);
  absl::MutexLock lock(&mu_);
  Prune(second);
  Second& s = At(second);
  for (const RouteLegReceipt& leg : receipt.legs) {
    s.picks++;
    s.hit_blocks += leg.cache_hits;
    s.request_blocks += leg.request_blocks;
    TargetSecond& t = targets_[leg.target][static_cast<size_t>(second) % kTargetSeconds];
    if (t.second != second) t = TargetSecond{second};
    t.picks++;
    t.hit_blocks += leg.cache_hits;
    t.request_blocks += leg.request_blocks;
  }
  picks_[picks_next_] = std::move(receipt);
  picks_next_ = (picks_next_ + 1) % kLastPicks;
  picks_count_ = std::min(picks_count_ + 1, kLastPicks);
}

void FleetHistory::RequestStarted(int64_t now_ns) {
  absl::MutexLock lock(&mu_);
  Second& s = At(SecondOf(now_ns));
  s.started++;
  inflight_++;
  s.max_inflight = std::max(s.max_inflight, inflight_);
  s.last_inflight = inflight_;
}

void FleetHistory::RequestEnded(int64_t now_ns, std::optional<double> ttft_s) {
  absl::MutexLock lock(&mu_);
  Second& s = At(SecondOf(now_ns));
  s.ended++;
  inflight_ = std::max<int64_t>(0, inflight_ - 1);
  s.last_inflight = inflight_;
  if (ttft_s) {
    s.ttft_count++;
    s.ttft_sum_s += *ttft_s;
    s.ttft_max_s = std::max(s.ttft_max_s, *ttft_s);
  }
}

std::vector<FleetHistory::Second> FleetHistory::Seconds(int64_t now_ns) const {
  const int64_t now = SecondOf(now_ns);
  std::vector<Second> out;
  out.reserve(kSeconds);
  absl::MutexLock lock(&mu_);
  // A quiet second had the in-flight count the last active second before it ended
  // with (before the window's first active second: the current count, approximately).
  int64_t carried = inflight_;
  for (int64_t sec = now - static_cast<int64_t>(kSeconds) + 1; sec <= now; ++sec) {
    const Second& s = seconds_[static_cast<size_t>(sec) % kSeconds];
    if (s.second == sec) {
      out.push_back(s);
      carried = s.last_inflight;
    } else {
      Second quiet;
      quiet.second = sec;
      quiet.max_inflight = quiet.last_inflight = sec == now ? inflight_ : carried;
      out.push_back(quiet);
    }
  }
  return out;
}

FleetHistory::TargetWindow FleetHistory::Target(const std::string& target, int64_t now_ns) const {
  const int64_t now = SecondOf(now_ns);
  TargetWindow w;
  absl::MutexLock lock(&mu_);
  auto it = targets_.find(target);
  if (it == targets_.end()) return w;
  for (const TargetSecond& b : it->second) {
    if (b.second < 0 || b.second > now || now - b.second >= static_cast<int64_t>(kTargetSeconds)) {
      continue;
    }
    w.picks += b.picks;
    w.hit_blocks += b.hit_blocks;
    w.request_blocks += b.request_blocks;
    if (now - b.second < 10) w.picks_10s += b.picks;
  }
  return w;
}

std::vector<RouteReceipt> FleetHistory::LastPicks() const {
  absl::MutexLock lock(&mu_);
  std::vector<RouteReceipt> out;
  out.reserve(picks_count_);
  const size_t first = (picks_next_ + kLastPicks - picks_count_) % kLastPicks;
  for (size_t i = 0; i < picks_count_; ++i) out.push_back(picks_[(first + i) % kLastPicks]);
  return out;
}

size_t FleetHistory::tracked_targets() const {
  absl::MutexLock lock(&mu_);
  return targets_.size();
}

}  // namespace infera::router
