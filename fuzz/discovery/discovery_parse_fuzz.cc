// Feeds arbitrary bytes to every discovery parser: none may crash, hang or throw,
// and a record that parses must survive a serialise/parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "discovery/etcd_json.h"
#include "discovery/static_discovery.h"
#include "discovery/worker_record.h"
#include "discovery/worker_table.h"

using namespace infera::discovery;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  auto record = ParseWorkerRecord(text);
  if (record.ok()) {
    auto again = ParseWorkerRecord(SerializeWorkerRecord(*record));
    if (!again.ok() || !(*again == *record)) std::abort();
  }
  (void)ParseWorkerFlag(text);
  (void)ParseWorkersList(text);
  (void)ParseRangeResponse(text);
  (void)ParseHeaderRevision(text);
  (void)ParseLeaseGrantResponse(text);
  (void)ParseKeepAliveMessage(text);
  (void)GatewayError(500, text);

  JsonObjectSplitter splitter(4096);
  std::vector<std::string> messages;
  // Feed in two pieces to exercise state kept across chunks.
  if (splitter.Feed(text.substr(0, size / 2), &messages).ok() &&
      splitter.Feed(text.substr(size / 2), &messages).ok()) {
    WorkerTable table{DiscoveryCallbacks{}};
    for (const std::string& m : messages) {
      auto watch = ParseWatchMessage(m);
      if (!watch.ok()) continue;
      for (const EtcdWatchEvent& e : watch->events) {
        if (e.type == EtcdWatchEvent::Type::kDelete) {
          table.ApplyDelete(e.kv.key);
        } else {
          (void)table.ApplyPut(e.kv.key, e.kv.value);
        }
      }
    }
  }
  return 0;
}
