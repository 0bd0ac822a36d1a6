#include "events/sharded_event_source.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace infera::events {
namespace {

// Every field of KvEventCounters, summed over the shards.
constexpr std::atomic<uint64_t> KvEventCounters::* kCounterFields[] = {
    &KvEventCounters::messages,        &KvEventCounters::batches,
    &KvEventCounters::events,          &KvEventCounters::skipped_events,
    &KvEventCounters::blocks_stored,   &KvEventCounters::blocks_removed,
    &KvEventCounters::cleared,         &KvEventCounters::gaps,
    &KvEventCounters::replays,         &KvEventCounters::replayed_batches,
    &KvEventCounters::replay_failures, &KvEventCounters::replays_skipped,
    &KvEventCounters::resyncs,         &KvEventCounters::restarts,
    &KvEventCounters::decode_errors,   &KvEventCounters::unknown_parents,
    &KvEventCounters::evicted_parents, &KvEventCounters::dropped,
    &KvEventCounters::block_size_mismatches,
};
static_assert(sizeof(KvEventCounters) == std::size(kCounterFields) * sizeof(std::atomic<uint64_t>),
              "a KvEventCounters field is missing from kCounterFields");

// `total` split into `shards` shares, at least 1 each.
int Share(int total, size_t i, size_t shards) {
  const auto n = static_cast<int>(shards);
  const int share = total / n + (static_cast<int>(i) < total % n ? 1 : 0);
  return std::max(share, 1);
}

}  // namespace

IngestorOptions ShardedKvEventSource::ShardOptions(const IngestorOptions& options, size_t i,
                                                   size_t shards) {
  IngestorOptions o = options;
  o.max_concurrent_replays = Share(options.max_concurrent_replays, i, shards);
  o.max_concurrent_verify_replays = Share(options.max_concurrent_verify_replays, i, shards);
  return o;
}

ShardedKvEventSource::ShardedKvEventSource(SharedKvIndex& index, const IngestorOptions& options,
                                           size_t shards) {
  if (shards == 0) throw std::invalid_argument("ShardedKvEventSource: shards must be >= 1");
  if (options.snapshot.enabled() || options.restored != nullptr || options.load != nullptr) {
    throw std::invalid_argument(
        "ShardedKvEventSource: snapshots are not supported across ingestion shards");
  }
  shards_.reserve(shards);
  for (size_t i = 0; i < shards; ++i) {
    shards_.push_back(std::make_unique<KvEventIngestor>(index, ShardOptions(options, i, shards)));
  }
}

ShardedKvEventSource::~ShardedKvEventSource() = default;

size_t ShardedKvEventSource::ShardOf(const core::TargetKey& key) const {
  const std::string name = key.ToString();
  return static_cast<size_t>(XXH3_64bits(name.data(), name.size()) % shards_.size());
}

core::TargetId ShardedKvEventSource::AddTarget(const IngestTarget& target) {
  return shards_[ShardOf(target.key)]->AddTarget(target);
}

void ShardedKvEventSource::RemoveTarget(const core::TargetKey& key) {
  shards_[ShardOf(key)]->RemoveTarget(key);
}

std::optional<core::TargetId> ShardedKvEventSource::FindTarget(const core::TargetKey& key) const {
  return shards_[ShardOf(key)]->FindTarget(key);
}

const KvEventCounters& ShardedKvEventSource::counters() const {
  for (auto field : kCounterFields) {
    uint64_t sum = 0;
    for (const auto& s : shards_) sum += (s->counters().*field).load(std::memory_order_relaxed);
    // Two concurrent callers may store sums taken at different times: the larger wins,
    // so a counter never goes backwards.
    std::atomic<uint64_t>& out = sums_.*field;
    uint64_t seen = out.load(std::memory_order_relaxed);
    while (seen < sum && !out.compare_exchange_weak(seen, sum, std::memory_order_relaxed)) {
    }
  }
  return sums_;
}

bool ShardedKvEventSource::Replaying() const {
  return std::any_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->Replaying(); });
}

int64_t ShardedKvEventSource::DescriptorsHeld() const {
  int64_t held = 0;
  for (const auto& s : shards_) held += s->DescriptorsHeld();
  return held;
}

std::vector<IngestTargetStatus> ShardedKvEventSource::TargetStatuses() const {
  std::vector<IngestTargetStatus> out;
  for (const auto& s : shards_) {
    std::vector<IngestTargetStatus> part = s->TargetStatuses();
    out.insert(out.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  }
  return out;
}

std::unique_ptr<KvEventSource> MakeZmqEventSource(SharedKvIndex& index, IngestorOptions options,
                                                  size_t shards) {
  if (shards <= 1) return std::make_unique<KvEventIngestor>(index, std::move(options));
  spdlog::info("kv events: {} ingestion shards (--kv-ingest-threads)", shards);
  return std::make_unique<ShardedKvEventSource>(index, options, shards);
}

}  // namespace infera::events
