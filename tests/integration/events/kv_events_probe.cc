// kv_events_probe: the C++ side of the Python peer test. Subscribes one target with
// KvEventIngestor, waits until the publisher's last sequence number has been applied,
// and compares the router's view with the expected blocks given as token prefixes.
//
//   kv_events_probe --events tcp://127.0.0.1:P --replay tcp://127.0.0.1:R --topic T
//                   --block-size 16 --last-seq N --expect FILE [--timeout-s 30]
//
// FILE: one cached block per line, its whole token prefix (space-separated ids); the
// block's router hash is the last hash of core::HashChain(prefix). Prints one JSON line
// with the outcome and exits 0 when the view equals the expectation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "core/hashing.h"
#include "events/kv_event_ingestor.h"

namespace {

int Usage() {
  std::cerr << "usage: kv_events_probe --events EP [--replay EP] [--topic T] [--block-size N]"
               " --last-seq N --expect FILE [--timeout-s S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace infera;
  std::string events, replay, topic, expect_path;
  uint32_t block_size = 16;
  long long last_seq = -1;
  int timeout_s = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--events") {
      events = value;
    } else if (flag == "--replay") {
      replay = value;
    } else if (flag == "--topic") {
      topic = value;
    } else if (flag == "--block-size") {
      block_size = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--last-seq") {
      last_seq = std::stoll(value);
    } else if (flag == "--expect") {
      expect_path = value;
    } else if (flag == "--timeout-s") {
      timeout_s = std::stoi(value);
    } else {
      return Usage();
    }
  }
  if (events.empty() || last_seq < 0 || expect_path.empty()) return Usage();

  std::vector<core::BlockHash> expected;
  std::ifstream in(expect_path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<core::TokenId> prefix;
    uint64_t t;
    while (ss >> t) prefix.push_back(static_cast<core::TokenId>(t));
    if (prefix.empty()) continue;
    const std::vector<core::BlockHash> chain = core::HashChain(prefix, block_size);
    if (chain.empty()) continue;
    expected.push_back(chain.back());
  }
  std::sort(expected.begin(), expected.end());

  events::KvEventIngestor ingestor;
  // A named target, not a braced temporary: g++ 12 at -O3 reports a false
  // maybe-uninitialized on the temporary's TargetKey string.
  events::IngestTarget target;
  target.key = {"peer:1", 0};
  target.events_endpoint = events;
  target.replay_endpoint = replay;
  target.block_size = block_size;
  target.topic = topic;
  const core::TargetId id = ingestor.AddTarget(target);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  events::IngestTargetStatus status;
  while (std::chrono::steady_clock::now() < deadline) {
    status = ingestor.TargetStatuses().at(0);
    if (status.last_seq && static_cast<long long>(*status.last_seq) >= last_seq) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<core::BlockHash> view = ingestor.WithIndex([&](const core::KvIndex& index) {
    std::vector<core::BlockHash> v = index.RouterHashes(id);
    std::sort(v.begin(), v.end());
    return v;
  });
  const bool reached = status.last_seq && static_cast<long long>(*status.last_seq) >= last_seq;
  const bool equal = view == expected;
  const auto& c = ingestor.counters();
  std::printf(
      "{\"reached_last_seq\":%s,\"equal\":%s,\"complete\":%s,\"view_blocks\":%zu,"
      "\"expected_blocks\":%zu,\"messages\":%llu,\"batches\":%llu,\"gaps\":%llu,"
      "\"replays\":%llu,\"resyncs\":%llu,\"decode_errors\":%llu,\"unknown_parents\":%llu}\n",
      reached ? "true" : "false", equal ? "true" : "false", status.complete ? "true" : "false",
      view.size(), expected.size(), static_cast<unsigned long long>(c.messages.load()),
      static_cast<unsigned long long>(c.batches.load()),
      static_cast<unsigned long long>(c.gaps.load()),
      static_cast<unsigned long long>(c.replays.load()),
      static_cast<unsigned long long>(c.resyncs.load()),
      static_cast<unsigned long long>(c.decode_errors.load()),
      static_cast<unsigned long long>(c.unknown_parents.load()));
  std::fflush(stdout);
  return reached && equal ? 0 : 1;
}
