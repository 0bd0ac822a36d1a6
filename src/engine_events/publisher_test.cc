#include "engine_events/publisher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "events/event_decoder.h"

namespace infera::events {
namespace {

std::vector<zmq::message_t> RecvMultipart(zmq::socket_t& s, int timeout_ms) {
  std::vector<zmq::message_t> frames;
  s.set(zmq::sockopt::rcvtimeo, timeout_ms);
  while (true) {
    zmq::message_t m;
    if (!s.recv(m)) return {};
    const bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) return frames;
  }
}

uint64_t BE64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | p[i];
  return v;
}

TEST(EventPublisher, PublishesThreeFramesAndServesReplay) {
  auto pub_or = EventPublisher::Create({.pub_endpoint = "tcp://127.0.0.1:0",
                                        .replay_endpoint = "tcp://127.0.0.1:0",
                                        .topic = "kv-events",
                                        .shape = WireShape::kSglang,
                                        .buffer_batches = 3});
  ASSERT_TRUE(pub_or.ok()) << pub_or.status();
  EventPublisher& pub = **pub_or;

  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv-events");
  sub.connect(pub.pub_endpoint());

  // PUB/SUB joins asynchronously: publish until the subscriber sees a message.
  std::vector<zmq::message_t> frames;
  for (int attempt = 0; attempt < 200 && frames.empty(); ++attempt) {
    pub.Publish(EventBatch{.ts = 1.0, .events = {AllCleared{}}});
    frames = RecvMultipart(sub, 25);
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].to_string(), "kv-events");
  EXPECT_EQ(frames[1].size(), 8u);
  DecodedBatch d;
  ASSERT_TRUE(
      DecodeEventBatch({static_cast<const uint8_t*>(frames[2].data()), frames[2].size()}, d).ok());
  ASSERT_EQ(d.events.size(), 1u);

  // Fill the buffer: it keeps the last 3 batches.
  const uint64_t first = pub.next_seq();
  for (int i = 0; i < 5; ++i) pub.Publish(EventBatch{.ts = 2.0, .events = {}});
  const uint64_t last = pub.next_seq() - 1;
  EXPECT_EQ(last, first + 4);

  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(pub.replay_endpoint());
  const uint8_t start[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start, 8));
  std::vector<uint64_t> seqs;
  while (true) {
    auto reply = RecvMultipart(dealer, 5000);
    ASSERT_EQ(reply.size(), 3u);
    EXPECT_EQ(reply[0].size(), 0u);
    ASSERT_EQ(reply[1].size(), 8u);
    const uint64_t seq = BE64(reply[1]);
    if (seq == ~uint64_t{0}) {
      EXPECT_EQ(reply[2].size(), 0u);
      break;
    }
    seqs.push_back(seq);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{last - 2, last - 1, last}));

  // A malformed request (2 frames at the ROUTER) is ignored; the next one is served.
  dealer.send(zmq::buffer(start, 8));
  const uint8_t from_last[8] = {0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(last)};
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(from_last, 8));
  auto reply = RecvMultipart(dealer, 5000);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(BE64(reply[1]), last);
}

TEST(EventPublisher, ConcurrentPublishGetsDistinctConsecutiveSeqs) {
  auto pub_or = EventPublisher::Create({.pub_endpoint = "tcp://127.0.0.1:*"});
  ASSERT_TRUE(pub_or.ok());
  EventPublisher& pub = **pub_or;
  std::vector<std::thread> threads;
  std::vector<std::vector<uint64_t>> seqs(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) seqs[t].push_back(pub.Publish(EventBatch{}));
    });
  }
  for (auto& th : threads) th.join();
  std::vector<bool> seen(800, false);
  for (const auto& v : seqs) {
    for (uint64_t s : v) {
      ASSERT_LT(s, 800u);
      EXPECT_FALSE(seen[s]);
      seen[s] = true;
    }
  }
  EXPECT_EQ(pub.next_seq(), 800u);
}

TEST(EventPublisher, BindFailureIsAnError) {
  auto pub = EventPublisher::Create({.pub_endpoint = "bogus://x"});
  EXPECT_FALSE(pub.ok());
}

}  // namespace
}  // namespace infera::events
