// Discovery against a real etcd: the JSON-gateway client, EtcdDiscovery,
// EtcdRegistrar and the infera-register sidecar, including lease expiry after a
// crash, SIGTERM revoke, etcd restarts and etcd losing its data.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "child_process.h"
#include "discovery/etcd_client.h"
#include "discovery/etcd_discovery.h"
#include "discovery/etcd_registrar.h"
#include "etcd_harness.h"
#include "testing/wait_for.h"

namespace infera::discovery {
namespace {

using infera::testing::ChildProcess;
using infera::testing::EtcdHarness;
using infera::testing::WaitFor;

constexpr int64_t kWaitMs = 20000;  // bound for "eventually" (a loaded 2-core CI)

// Collects discovery callbacks (called on the discovery thread).
class Recorder {
 public:
  DiscoveryCallbacks Callbacks() {
    DiscoveryCallbacks c;
    c.on_added = [this](const WorkerRecord& r) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_FALSE(workers_.contains(r.worker_id)) << "added twice: " << r.worker_id;
      workers_[r.worker_id] = r;
      ++added_;
    };
    c.on_updated = [this](const WorkerRecord& r) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_TRUE(workers_.contains(r.worker_id)) << "update of unknown " << r.worker_id;
      workers_[r.worker_id] = r;
      ++updated_;
    };
    c.on_removed = [this](const std::string& id) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_EQ(workers_.erase(id), 1u) << "removal of unknown " << id;
      ++removed_;
    };
    return c;
  }
  bool Has(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_.contains(id);
  }
  std::optional<WorkerRecord> Get(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(id);
    if (it == workers_.end()) return std::nullopt;
    return it->second;
  }
  int added() {
    std::lock_guard<std::mutex> lock(mu_);
    return added_;
  }
  int updated() {
    std::lock_guard<std::mutex> lock(mu_);
    return updated_;
  }
  int removed() {
    std::lock_guard<std::mutex> lock(mu_);
    return removed_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, WorkerRecord> workers_;
  int added_ = 0, updated_ = 0, removed_ = 0;
};

class DiscoveryEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.Start().ok()) << etcd_.work_dir(); }

  EtcdClientOptions ClientOptions() {
    EtcdClientOptions o;
    o.endpoints = etcd_.endpoint();
    o.request_timeout_ms = 3000;
    return o;
  }
  std::unique_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create(ClientOptions());
    EXPECT_TRUE(c.ok());
    return *std::move(c);
  }
  std::unique_ptr<EtcdDiscovery> StartDiscovery(Recorder& recorder) {
    EtcdDiscoveryOptions o;
    o.client = ClientOptions();
    o.backoff_max_ms = 500;
    auto d = std::make_unique<EtcdDiscovery>(o);
    EXPECT_TRUE(d->Start(recorder.Callbacks()).ok());
    EXPECT_TRUE(WaitFor([&] { return d->snapshot_count() >= 1; }, kWaitMs));
    return d;
  }
  std::unique_ptr<ChildProcess> StartSidecar(const std::string& port, int ttl_s, int keepalive_s,
                                             const std::string& model = "Qwen/Qwen3-0.6B") {
    auto p = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            INFERA_REGISTER_BIN, "--url", "http://127.0.0.1:" + port, "--model-name", model,
            "--engine", "sglang", "--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-block-size",
            "32", "--dp-size", "2", "--etcd-endpoint", etcd_.endpoint(), "--lease-ttl-s",
            std::to_string(ttl_s), "--keepalive-s", std::to_string(keepalive_s)},
        etcd_.work_dir() + "/register-" + port + ".log");
    EXPECT_TRUE(p->Start().ok());
    return p;
  }

  EtcdHarness etcd_;
};

TEST_F(DiscoveryEtcdTest, ClientKvLeaseAndWatchRoundTrip) {
  auto client = Client();
  auto lease = client->LeaseGrant(10);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->ttl_s, 10);
  ASSERT_TRUE(client->Put("/t/a", "va", lease->id).ok());
  auto put_b = client->Put("/t/b", "vb");
  ASSERT_TRUE(put_b.ok());
  ASSERT_TRUE(client->Put("/u/c", "outside").ok());

  auto range = client->RangePrefix("/t/");
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].key, "/t/a");
  EXPECT_EQ(range->kvs[0].value, "va");
  EXPECT_EQ(range->kvs[0].lease_id, lease->id);
  EXPECT_EQ(range->kvs[1].value, "vb");

  auto alive = client->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(alive.ok()) << alive.status();
  EXPECT_GT(alive->ttl_s, 0);

  // Watch from the snapshot: sees a delete and a revoke-driven delete, in order.
  std::vector<std::string> seen;
  std::thread writer([&] {
    auto c = Client();
    EXPECT_TRUE(c->DeleteKey("/t/b").ok());
    EXPECT_TRUE(c->LeaseRevoke(lease->id).ok());
  });
  absl::Status watch = client->WatchPrefix(
      "/t/", range->revision + 1, [&](const EtcdWatchMessage& m) -> absl::Status {
        for (const auto& e : m.events) {
          seen.push_back((e.type == EtcdWatchEvent::Type::kDelete ? "-" : "+") + e.kv.key);
        }
        if (seen.size() >= 2) return absl::AbortedError("done");
        return absl::OkStatus();
      });
  writer.join();
  EXPECT_EQ(watch.code(), absl::StatusCode::kAborted) << watch;
  EXPECT_EQ(seen, (std::vector<std::string>{"-/t/b", "-/t/a"}));

  // The revoked lease is gone: keepalive answers TTL 0, revoke answers NotFound.
  auto gone = client->LeaseKeepAlive(lease->id);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_LE(gone->ttl_s, 0);
  EXPECT_EQ(client->LeaseRevoke(lease->id).code(), absl::StatusCode::kNotFound);
}

TEST_F(DiscoveryEtcdTest, ClientWatchFromCompactedRevisionAndCancel) {
  auto client = Client();
  auto first = client->Put("/t/a", "1");
  ASSERT_TRUE(first.ok());
  auto second = client->Put("/t/a", "2");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(client->Compact(*second).ok());
  int64_t compact_revision = 0;
  absl::Status s = client->WatchPrefix("/t/", *first, [&](const EtcdWatchMessage& m) {
    if (m.canceled) {
      compact_revision = m.compact_revision;
      return absl::OutOfRangeError("compacted");
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(compact_revision, *second);

  // Cancel() from another thread ends an idle watch.
  std::atomic<bool> watching{false};
  std::thread canceller([&] {
    WaitFor([&] { return watching.load(); }, kWaitMs);
    client->Cancel();
  });
  absl::Status cancelled = client->WatchPrefix("/t/", 0, [&](const EtcdWatchMessage& m) {
    if (m.created) watching = true;
    return absl::OkStatus();
  });
  canceller.join();
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
  EXPECT_EQ(client->RangePrefix("/").status().code(), absl::StatusCode::kCancelled);
}

TEST_F(DiscoveryEtcdTest, ClientReportsUnreachableEtcd) {
  EtcdClientOptions o;
  o.endpoints = "127.0.0.1:" + std::to_string(infera::testing::PickFreePort());
  o.request_timeout_ms = 1000;
  auto client = EtcdClient::Create(o);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->RangePrefix("/").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(EtcdClient::Create({.endpoints = "nonsense"}).ok());
}

TEST_F(DiscoveryEtcdTest, SidecarRecordAppearsAndSigtermRemovesItAtOnce) {
  Recorder recorder;
  auto discovery = StartDiscovery(recorder);
  // A long TTL: removal within the wait bound below proves the revoke.
  auto sidecar = StartSidecar("9101", /*ttl_s=*/60, /*keepalive_s=*/20);
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9101"); }, kWaitMs));
  auto record = recorder.Get("127.0.0.1:9101");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->url, "http://127.0.0.1:9101");
  EXPECT_EQ(record->model_name, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(record->engine, "sglang");
  EXPECT_EQ(record->kv_events_endpoint, "tcp://127.0.0.1:5557");
  EXPECT_EQ(record->kv_block_size, 32u);
  EXPECT_EQ(record->dp_size, 2u);

  // An update of the value under the same key is reported as an update; a value
  // that is not a worker record is ignored (and counted), not a crash.
  auto client = Client();
  WorkerRecord changed = *record;
  changed.model_name = "other";
  ASSERT_TRUE(client->Put("/infera/workers/127.0.0.1:9101", SerializeWorkerRecord(changed)).ok());
  ASSERT_TRUE(WaitFor([&] { return recorder.updated() == 1; }, kWaitMs));
  EXPECT_EQ(recorder.Get("127.0.0.1:9101")->model_name, "other");
  ASSERT_TRUE(client->Put("/infera/workers/garbage", "{not a record").ok());
  ASSERT_TRUE(WaitFor([&] { return discovery->rejected_record_count() == 1; }, kWaitMs));
  // The manual put dropped the sidecar's lease from the key; put it back with one.
  ASSERT_EQ(sidecar->Stop(), 0);
  sidecar = StartSidecar("9101", /*ttl_s=*/60, /*keepalive_s=*/20);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = recorder.Get("127.0.0.1:9101");
        return r.has_value() && r->model_name == "Qwen/Qwen3-0.6B";
      },
      kWaitMs));

  sidecar->Signal(SIGTERM);
  EXPECT_EQ(sidecar->Wait(kWaitMs), 0);
  ASSERT_TRUE(WaitFor([&] { return !recorder.Has("127.0.0.1:9101"); }, kWaitMs));
  auto left = client->RangePrefix("/infera/workers/127.0.0.1:9101");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->kvs.empty());
  discovery->Stop();
}

// The PD flags land in disagg_mode / disagg_meta exactly as a record file would put them.
TEST_F(DiscoveryEtcdTest, SidecarRegistersPdPrefillWorkerWithBootstrapParams) {
  Recorder recorder;
  auto discovery = StartDiscovery(recorder);
  ChildProcess sidecar({INFERA_REGISTER_BIN, "--url", "http://127.0.0.1:9107", "--engine", "sglang",
                        "--disagg-mode", "prefill", "--disagg-protocol", "sglang-bootstrap",
                        "--bootstrap-port", "30001", "--etcd-endpoint", etcd_.endpoint()},
                       etcd_.work_dir() + "/register-9107.log");
  ASSERT_TRUE(sidecar.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9107"); }, kWaitMs));
  auto record = recorder.Get("127.0.0.1:9107");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->disagg_mode, DisaggMode::kPrefill);
  EXPECT_EQ(record->pd_protocol, PdProtocol::kSglangBootstrap);
  EXPECT_EQ(record->pd.bootstrap_host, "127.0.0.1");  // default: the url's host
  EXPECT_EQ(record->pd.bootstrap_port, 30001u);
  sidecar.Signal(SIGTERM);
  EXPECT_EQ(sidecar.Wait(kWaitMs), 0);
}

TEST_F(DiscoveryEtcdTest, KilledSidecarVanishesAfterTheTtl) {
  Recorder recorder;
  auto discovery = StartDiscovery(recorder);
  auto sidecar = StartSidecar("9102", /*ttl_s=*/2, /*keepalive_s=*/1);
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9102"); }, kWaitMs));
  // Outlives several TTLs while the sidecar keeps it alive.
  auto client = Client();
  auto before = client->RangePrefix("/infera/workers/");
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->kvs.size(), 1u);
  std::this_thread::sleep_for(std::chrono::seconds(5));  // > 2 TTLs, not a timing assertion
  EXPECT_TRUE(recorder.Has("127.0.0.1:9102"));
  EXPECT_EQ(recorder.removed(), 0);

  sidecar->Signal(SIGKILL);  // no revoke
  EXPECT_EQ(sidecar->Wait(kWaitMs), 128 + SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return !recorder.Has("127.0.0.1:9102"); }, kWaitMs));
  EXPECT_EQ(recorder.removed(), 1);
  discovery->Stop();
}

TEST_F(DiscoveryEtcdTest, DiscoveryAndRegistrarSurviveEtcdRestarts) {
  Recorder recorder;
  auto discovery = StartDiscovery(recorder);
  WorkerRecord record;
  record.worker_id = "127.0.0.1:9103";
  record.url = "http://127.0.0.1:9103";
  record.engine = "mock";
  EtcdRegistrarOptions options;
  options.client = ClientOptions();
  options.lease_ttl_s = 4;
  options.keepalive_interval_s = 1;
  options.backoff_max_ms = 300;
  auto registrar = EtcdRegistrar::Create(record, options);
  ASSERT_TRUE(registrar.ok()) << registrar.status();
  (*registrar)->Start();
  ASSERT_TRUE((*registrar)->WaitUntilRegistered(kWaitMs));
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9103"); }, kWaitMs));

  // 1. Crash and restart with the same data: the lease and record survive, the
  //    discovery reconnects and sees new registrations.
  int64_t errors_before = discovery->error_count();
  etcd_.Kill();
  ASSERT_TRUE(WaitFor([&] { return discovery->error_count() > errors_before; }, kWaitMs));
  ASSERT_TRUE(etcd_.Start().ok());
  auto sidecar = StartSidecar("9104", /*ttl_s=*/10, /*keepalive_s=*/2);
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9104"); }, kWaitMs));
  EXPECT_TRUE(recorder.Has("127.0.0.1:9103"));
  EXPECT_EQ((*registrar)->registration_count(), 1);

  // 2. etcd comes back without its data (revisions restart, leases are gone):
  //    the registrar notices the lost lease and registers again; the sidecar too;
  //    the discovery resyncs from the new snapshot.
  etcd_.Kill();
  etcd_.WipeData();
  ASSERT_TRUE(etcd_.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return (*registrar)->registration_count() >= 2; }, kWaitMs));
  auto client = Client();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = client->RangePrefix("/infera/workers/");
        return r.ok() && r->kvs.size() == 2;
      },
      kWaitMs));
  // A worker registered only in the new etcd shows the discovery is live again.
  auto late = StartSidecar("9105", /*ttl_s=*/10, /*keepalive_s=*/2);
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9105"); }, kWaitMs));
  EXPECT_TRUE(recorder.Has("127.0.0.1:9103"));
  EXPECT_TRUE(recorder.Has("127.0.0.1:9104"));

  // Revoke on Stop removes the in-process registrar's record.
  EXPECT_TRUE((*registrar)->Stop().ok());
  ASSERT_TRUE(WaitFor([&] { return !recorder.Has("127.0.0.1:9103"); }, kWaitMs));
  EXPECT_EQ(sidecar->Stop(), 0);
  EXPECT_EQ(late->Stop(), 0);
  // (The wiped etcd may have briefly shown no workers, so count states, not events.)
  ASSERT_TRUE(WaitFor(
      [&] { return !recorder.Has("127.0.0.1:9104") && !recorder.Has("127.0.0.1:9105"); }, kWaitMs));
  discovery->Stop();
}

TEST_F(DiscoveryEtcdTest, DiscoveryStartsBeforeEtcdAndStopsPromptlyWhileDown) {
  etcd_.Stop();
  Recorder recorder;
  EtcdDiscoveryOptions o;
  o.client = ClientOptions();
  o.backoff_max_ms = 300;
  EtcdDiscovery discovery(o);
  ASSERT_TRUE(discovery.Start(recorder.Callbacks()).ok());
  ASSERT_TRUE(WaitFor([&] { return discovery.error_count() >= 2; }, kWaitMs));
  ASSERT_TRUE(etcd_.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return discovery.snapshot_count() >= 1; }, kWaitMs));
  auto client = Client();
  WorkerRecord r;
  r.worker_id = "127.0.0.1:9106";
  r.url = "http://127.0.0.1:9106";
  ASSERT_TRUE(client->Put("/infera/workers/127.0.0.1:9106", SerializeWorkerRecord(r)).ok());
  ASSERT_TRUE(WaitFor([&] { return recorder.Has("127.0.0.1:9106"); }, kWaitMs));
  etcd_.Kill();
  discovery.Stop();  // returns although etcd is gone (bounded by the test timeout)
  EXPECT_TRUE(recorder.Has("127.0.0.1:9106"));  // workers stay while etcd is away
}

}  // namespace
}  // namespace infera::discovery

namespace infera::discovery {
namespace {

// Bad flags or records make the sidecar exit 2 with a message, before any etcd I/O.
TEST(InferaRegisterFlagsTest, RejectsBadRecordsAndSettings) {
  const std::string log = ::testing::TempDir() + "/infera_register_flags.log";
  const std::vector<std::vector<std::string>> cases = {
      {"--url", "10.0.0.5:30000"},
      {"--url", "http://h:1", "--engine", "trt"},
      {"--url", "http://h:1", "--dp-size", "0"},
      {"--record-json", "{not json"},
      {"--record-json", R"({"url": "http://h:1"})", "--url", "http://h:2"},
      {"--url", "http://h:1", "--lease-ttl-s", "1"},
      {"--url", "http://h:1", "--lease-ttl-s", "10", "--keepalive-s", "10"},
      {"--url", "http://h:1", "--etcd-endpoint", "no-port"},
      {"--url", "http://h:1", "--kv-block-size", "-3"},
      {"--url", "http://h:1", "--disagg-mode", "prefill"},  // no protocol
      {"--url", "http://h:1", "--disagg-mode", "decode", "--disagg-protocol", "nccl"},
      {"--url", "http://h:1", "--disagg-mode", "prefill", "--disagg-protocol", "vllm-mooncake"},
      {"--url", "http://h:1", "--disagg-mode", "prefill", "--disagg-protocol", "vllm-mooncake",
       "--engine-id", "e", "--bootstrap-addr", "nohostport"},
      {"--url", "http://h:1", "--bootstrap-port", "70000"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv = {INFERA_REGISTER_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p(argv, log);
    ASSERT_TRUE(p.Start().ok());
    int code = p.Wait(kWaitMs);
    EXPECT_EQ(code, 2) << args[0] << " " << args[1];
  }
}

}  // namespace
}  // namespace infera::discovery
