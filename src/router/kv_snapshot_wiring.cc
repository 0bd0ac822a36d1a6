#include "router/kv_snapshot_wiring.h"

#include <memory>

#include "router/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

void Line(std::string& out, std::string_view name, std::string_view type, std::string_view help,
          const std::string& value) {
  RenderHeader(out, name, type, help);
  out += std::string(name) + " " + value + "\n";
}

void Labeled(std::string& out, std::string_view name, std::string_view label,
             std::string_view value, uint64_t count) {
  out += std::string(name) + "{" + std::string(label) + "=\"" + std::string(value) + "\"} " +
         std::to_string(count) + "\n";
}

}  // namespace

void PrepareKvSnapshots(const events::KvSnapshotOptions& options, events::IngestorOptions& ingestor,
                        events::FetchedSnapshot fetched) {
  if (!options.enabled()) return;
  auto stats = std::make_shared<events::KvSnapshotStats>();
  // The file is checked here; the ingestor builds its views beside the verifies.
  ingestor.load =
      events::KvSnapshotLoad::Open(options, events::SnapshotTransport::kZmq, stats,
                                   std::move(fetched.checked), std::move(fetched.stream));
  ingestor.snapshot = options;
  ingestor.snapshot_stats = std::move(stats);
}

void PrepareKvSnapshots(const events::KvSnapshotOptions& options, events::NatsSourceOptions& nats) {
  if (!options.enabled()) return;
  auto stats = std::make_shared<events::KvSnapshotStats>();
  nats.load = events::KvSnapshotLoad::Open(options, events::SnapshotTransport::kNats, stats);
  nats.snapshot = options;
  nats.snapshot_stats = std::move(stats);
}

void RenderKvSnapshotMetrics(const events::KvEventSource& source, std::string& out) {
  const events::KvSnapshotStats* s = source.snapshot_stats();
  if (s == nullptr) return;
  constexpr std::string_view kWrites = "infera_router_kv_snapshot_writes_total";
  RenderHeader(out, kWrites, "counter", "KV-view snapshot writes by result.");
  Labeled(out, kWrites, "result", "ok", s->writes_ok.load());
  Labeled(out, kWrites, "result", "error", s->writes_error.load());
  Labeled(out, kWrites, "result", "skipped", s->writes_skipped.load());
  Line(out, "infera_router_kv_snapshot_last_write_timestamp_seconds", "gauge",
       "Unix time of the last successful snapshot write.",
       std::to_string(s->last_write_unix_ms.load() / 1000.0));
  Line(out, "infera_router_kv_snapshot_last_write_duration_seconds", "gauge",
       "First export step to rename, of the last successful write.",
       std::to_string(s->last_write_duration_us.load() / 1e6));
  Line(out, "infera_router_kv_snapshot_bytes", "gauge", "Size of the last written snapshot.",
       std::to_string(s->last_write_bytes.load()));
  Line(out, "infera_router_kv_snapshot_blocks", "gauge", "Blocks in the last written snapshot.",
       std::to_string(s->last_write_blocks.load()));
  constexpr std::string_view kLoads = "infera_router_kv_snapshot_loads_total";
  RenderHeader(out, kLoads, "counter", "Start-up snapshot loads by result.");
  for (size_t i = 0; i < events::kLoadResultCount; ++i) {
    Labeled(out, kLoads, "result", events::LoadResultName(static_cast<events::LoadResult>(i)),
            s->loads[i].load());
  }
  Line(out, "infera_router_kv_snapshot_load_age_seconds", "gauge",
       "Age of the loaded snapshot at load.", std::to_string(s->load_age_ms.load() / 1000.0));
  Line(out, "infera_router_kv_snapshot_restore_seconds", "gauge",
       "The staging build, from opening the file to the swap.",
       std::to_string(s->restore_us.load() / 1e6));
  Line(out, "infera_router_kv_snapshot_restored_blocks_total", "counter",
       "Blocks restored from a snapshot.", std::to_string(s->restored_blocks.load()));
  constexpr std::string_view kRefused = "infera_router_kv_snapshot_refused_targets_total";
  RenderHeader(out, kRefused, "counter", "Snapshot records not restored, by reason.");
  Labeled(out, kRefused, "reason", "block_size", s->refused_block_size.load());
  Labeled(out, kRefused, "reason", "unclaimed", s->refused_unclaimed.load());
  Labeled(out, kRefused, "reason", "corrupt", s->refused_corrupt.load());
  constexpr std::string_view kVerify = "infera_router_kv_snapshot_verify_total";
  RenderHeader(out, kVerify, "counter", "Verify outcomes of restored views.");
  for (size_t i = 0; i < 7; ++i) {
    Labeled(out, kVerify, "result", events::VerifyResultName(static_cast<events::VerifyResult>(i)),
            s->verify[i].load());
  }
}

void StartFinalKvSnapshot(events::KvEventSource& source) { source.RequestFinalSnapshot(); }

bool WaitFinalKvSnapshot(events::KvEventSource& source, int64_t timeout_ms) {
  if (source.snapshot_stats() == nullptr) return true;
  if (source.WaitFinalSnapshot(timeout_ms)) return true;
  spdlog::warn("kv-snapshot: final snapshot abandoned after {} s", timeout_ms / 1000);
  return false;
}

}  // namespace infera::router
