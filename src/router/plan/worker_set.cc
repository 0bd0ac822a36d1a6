#include "router/plan/worker_set.h"

#include <algorithm>

#include "event_wire/dp_endpoint.h"
#include "router/plan/pick_planner.h"
#include "router/metrics/router_metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {

WorkerSet::WorkerSet(WorkerSetOptions options, events::KvEventSource& events, PickPlanner& planner,
                     RouterMetrics& metrics)
    : options_(std::move(options)),
      events_(events),
      planner_(planner),
      metrics_(metrics),
      snapshot_(std::make_shared<const Fleet>()) {}

std::string WorkerSet::RankEndpoint(const std::string& endpoint, uint32_t rank) {
  return events::OffsetEndpointPort(endpoint, rank);
}

size_t IndexBoundFor(const discovery::WorkerRecord& record, std::optional<size_t> flag) {
  if (flag.has_value()) return *flag;
  if (record.num_gpu_blocks > 0) return record.num_gpu_blocks + (record.num_gpu_blocks + 3) / 4;
  return kDefaultMaxIndexBlocks;
}

void WorkerSet::Add(const discovery::WorkerRecord& record) {
  auto ep = http::ParseHttpUrl(record.url);
  if (!ep.ok()) {
    metrics_.CountWorkerRefused("bad_url");
    spdlog::error("worker {}: unusable url: {}", record.worker_id, ep.status().ToString());
    return;
  }
  // Outside the lock: a host name is resolved here (on discovery's thread).
  if (auto self = self_.load(std::memory_order_acquire);
      self && self->PointsAtSelf(ep->host, ep->port)) {
    metrics_.CountWorkerRefused("self_address");
    spdlog::error(
        "worker {} refused: its url {}:{} is this router's own listen address (every request "
        "sent there would come back as a new one: a loop)",
        record.worker_id, ep->host, ep->port);
    return;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& w : workers_) {
    if (w->record.worker_id == record.worker_id) return;  // Update handles changes
  }
  auto w = std::make_shared<FleetWorker>(record, *ep, options_.breaker, options_.checks);
  for (uint32_t r = 0; r < std::max<uint32_t>(1, record.dp_size); ++r) {
    events::IngestTarget t;
    t.key = {record.worker_id, record.dp_rank + r};
    if (options_.kv_events) {
      t.events_endpoint = RankEndpoint(record.kv_events_endpoint, record.dp_rank + r);
      t.replay_endpoint = RankEndpoint(record.kv_replay_endpoint, record.dp_rank + r);
    }
    t.block_size = record.kv_block_size == 0 ? 16 : record.kv_block_size;
    t.topic = options_.kv_events_topic;
    t.max_blocks = IndexBoundFor(record, options_.max_index_blocks);
    w->targets.push_back(events_.AddTarget(t));
    for (int role = 0; role < 3; ++role) {
      w->picks[role].push_back(
          metrics_.PickCounter(core::Role(role), core::TargetName(t.key, record.dp_size)));
    }
  }
  // The KV pressure term knows the capacity from the start (else it learns it once the
  // view first shrinks).
  if (record.num_gpu_blocks > 0) planner_.SetCapacityBlocks(*w, record.num_gpu_blocks);
  if (options_.max_num_seqs > 0) planner_.SetMaxSeqs(*w, options_.max_num_seqs);
  spdlog::info("worker added: {} url={} model={} mode={} ranks={}", record.worker_id, record.url,
               record.model_name, core::RoleName(static_cast<core::Role>(record.disagg_mode)),
               w->targets.size());
  workers_.push_back(w);
  Publish();
  if (on_added_) on_added_(std::move(w));  // only posts work: safe under mu_
}

void WorkerSet::Remove(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i]->record.worker_id != worker_id) continue;
    std::shared_ptr<const FleetWorker> gone = workers_[i];
    workers_.erase(workers_.begin() + static_cast<ptrdiff_t>(i));
    Publish();
    planner_.Retire(*gone, events_);
    spdlog::info("worker removed: {}", worker_id);
    return;
  }
}

void WorkerSet::Update(const discovery::WorkerRecord& record) {
  Remove(record.worker_id);
  Add(record);
}

discovery::DiscoveryCallbacks WorkerSet::Callbacks() {
  discovery::DiscoveryCallbacks cb;
  cb.on_added = [this](const discovery::WorkerRecord& r) { Add(r); };
  cb.on_updated = [this](const discovery::WorkerRecord& r) { Update(r); };
  cb.on_removed = [this](const std::string& id) { Remove(id); };
  return cb;
}

void WorkerSet::Publish() {
  snapshot_.store(std::make_shared<const Fleet>(workers_), std::memory_order_release);
}

}  // namespace infera::router
