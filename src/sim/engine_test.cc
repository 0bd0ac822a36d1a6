#include "sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/hashing.h"
#include "sim/test_tokens.h"

namespace infera::sim {
namespace {

using core::TokenId;

using test_util::Tokens;

EngineConfig SmallConfig() {
  EngineConfig c;
  c.block_size = 16;
  c.num_gpu_blocks = 64;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 256;
  return c;
}

// Runs the engine until idle; returns the outputs per request id.
std::map<uint64_t, std::vector<TokenOutput>> RunToIdle(Engine& e, int64_t* total_ns = nullptr) {
  std::map<uint64_t, std::vector<TokenOutput>> out;
  int guard = 0;
  while (e.HasWork() && ++guard < 100000) {
    StepResult r = e.Step();
    if (total_ns) *total_ns += r.duration_ns;
    for (const TokenOutput& o : r.outputs) out[o.request_id].push_back(o);
  }
  EXPECT_FALSE(e.HasWork());
  return out;
}

TEST(EngineTest, GeneratesMaxTokensAndReportsNoCacheOnColdStart) {
  Engine e(SmallConfig());
  ASSERT_TRUE(e.AddRequest({1, Tokens(40, 1), 5}));
  auto out = RunToIdle(e);
  ASSERT_EQ(out[1].size(), 5u);
  EXPECT_EQ(out[1][0].index, 0u);
  EXPECT_EQ(out[1][0].cached_tokens, 0u);
  EXPECT_EQ(out[1][0].prompt_tokens, 40u);
  EXPECT_TRUE(out[1][4].finished);
  EXPECT_FALSE(out[1][3].finished);
  EXPECT_EQ(out[1][2].token, Engine::GeneratedToken(1, 2, e.config().vocab_size));
}

TEST(EngineTest, PrefixCacheHitInFullBlocks) {
  Engine e(SmallConfig());
  std::vector<TokenId> a = Tokens(70, 1);  // 4 full blocks + 6 tokens
  ASSERT_TRUE(e.AddRequest({1, a, 1}));
  RunToIdle(e);
  std::vector<TokenId> b(a.begin(), a.begin() + 50);  // shares 3 full blocks
  b.push_back(999);
  EXPECT_EQ(e.CachedPrefixTokens(b), 48u);
  ASSERT_TRUE(e.AddRequest({2, b, 1}));
  auto out = RunToIdle(e);
  EXPECT_EQ(out[2][0].cached_tokens, 48u);
  // The identical prompt: hits are capped so that one token is computed.
  std::vector<TokenId> c(a.begin(), a.begin() + 64);
  ASSERT_TRUE(e.AddRequest({3, c, 1}));
  out = RunToIdle(e);
  EXPECT_EQ(out[3][0].cached_tokens, 48u);
  EXPECT_EQ(e.stats().cached_tokens, 96u);
}

TEST(EngineTest, EmitsStoredEventsForPromptAndGeneratedBlocks) {
  EngineConfig cfg = SmallConfig();
  Engine e(cfg);
  std::vector<TokenId> p = Tokens(20, 5);  // one full prompt block
  ASSERT_TRUE(e.AddRequest({7, p, 20}));   // 40 tokens in total: 2 full blocks computed
  RunToIdle(e);
  std::vector<KvEvent> ev = e.TakeEvents();
  std::vector<core::BlockHash> stored;
  for (const KvEvent& x : ev) {
    ASSERT_EQ(x.kind, KvEvent::Kind::kBlockStored);
    EXPECT_EQ(x.token_ids.size(), x.block_hashes.size() * 16);
    if (stored.empty()) {
      EXPECT_FALSE(x.parent_hash.has_value());
    } else {
      EXPECT_EQ(x.parent_hash, stored.back());
    }
    stored.insert(stored.end(), x.block_hashes.begin(), x.block_hashes.end());
  }
  // 20 prompt + 19 fed-back outputs = 39 computed tokens: 2 full blocks.
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0], e.HashBlocks(p)[0]);
  EXPECT_EQ(ev[0].token_ids, std::vector<TokenId>(p.begin(), p.begin() + 16));
}

// vLLM's extra keys (kv_cache_utils.generate_block_hash_extra_keys): the cache_salt in
// the first block's hash, the LoRA adapter in every block's.
TEST(EngineTest, CacheSaltAndLoraKeepPrefixCachesApart) {
  Engine e(SmallConfig());
  const std::vector<TokenId> p = Tokens(70, 3);  // 4 full blocks + 6
  const CacheKeys a{.cache_salt = "tenant-a"};
  const CacheKeys b{.cache_salt = "tenant-b"};
  const CacheKeys lora{.lora_name = "sql-lora", .lora_id = 1};
  ASSERT_TRUE(e.AddRequest({1, p, 1, false, a}));
  RunToIdle(e);
  EXPECT_EQ(e.CachedPrefixTokens(p, a), 64u);  // the same tenant hits
  EXPECT_EQ(e.CachedPrefixTokens(p, b), 0u);   // another tenant's guess: nothing
  EXPECT_EQ(e.CachedPrefixTokens(p), 0u);      // nor an unsalted one
  EXPECT_EQ(e.CachedPrefixTokens(p, lora), 0u);
  ASSERT_TRUE(e.AddRequest({2, p, 1, false, b}));
  ASSERT_TRUE(e.AddRequest({3, p, 1, false, lora}));
  auto out = RunToIdle(e);
  EXPECT_EQ(out[2][0].cached_tokens, 0u);
  EXPECT_EQ(out[3][0].cached_tokens, 0u);
  ASSERT_TRUE(e.AddRequest({4, p, 1, false, lora}));
  ASSERT_TRUE(e.AddRequest({5, p, 1}));
  out = RunToIdle(e);
  EXPECT_EQ(out[4][0].cached_tokens, 64u);  // the same adapter hits
  EXPECT_EQ(out[5][0].cached_tokens, 0u);   // the base model does not
}

TEST(EngineTest, StoredEventsCarryLoraAndExtraKeysAsVllm) {
  EngineConfig cfg = SmallConfig();
  cfg.track_router_hashes = true;
  Engine e(cfg);
  const std::vector<TokenId> p = Tokens(40, 9);  // 2 full prompt blocks
  const CacheKeys keys{.cache_salt = "s", .lora_name = "sql-lora", .lora_id = 2};
  ASSERT_TRUE(e.AddRequest({1, p, 1, false, keys}));
  RunToIdle(e);
  std::vector<KvEvent> ev = e.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].lora_id, 2);
  EXPECT_EQ(ev[0].lora_name, "sql-lora");
  using L = std::vector<std::string>;
  ASSERT_EQ(ev[0].extra_keys.size(), 2u);
  EXPECT_EQ(ev[0].extra_keys[0], (L{"sql-lora", "s"}));
  EXPECT_EQ(ev[0].extra_keys[1], (L{"sql-lora"}));
  EXPECT_EQ(ev[0].block_hashes, e.HashBlocks(std::span(p).first(32), keys));
  // The router hash the engine keeps beside each block is the request's keyed chain.
  std::vector<core::BlockHash> router;
  core::AppendChain(std::span(p).first(32), 16, 0,
                    core::HashKeys{core::KeyDigest("s"), core::KeyDigest("sql-lora")}, router);
  std::vector<core::BlockHash> aux;
  for (const auto& [engine, r] : e.cache().CachedBlocks()) aux.push_back(r);
  std::sort(aux.begin(), aux.end());
  std::sort(router.begin(), router.end());
  EXPECT_EQ(aux, router);
}

TEST(EngineTest, CloneStepsAsTheOriginalAndLeavesItUntouched) {
  EngineConfig cfg = SmallConfig();
  cfg.max_num_batched_tokens = 100;
  Engine e(cfg);
  ASSERT_TRUE(e.AddRequest({1, Tokens(250, 1), 6}));
  ASSERT_TRUE(e.AddRequest({2, Tokens(40, 1), 3}));  // shares r1's first two blocks
  ASSERT_TRUE(e.AddRequest({3, Tokens(90, 500), 4}));
  e.Step();  // mid-prefill: running and waiting requests, cached blocks
  std::unique_ptr<Engine> c = e.Clone();
  EXPECT_EQ(c->NumRunning(), e.NumRunning());
  EXPECT_EQ(c->NumWaiting(), e.NumWaiting());
  // What-if on the copy: one more request, run to the end.
  ASSERT_TRUE(c->AddRequest({4, Tokens(40, 1), 2}));
  int64_t copy_ns = 0;
  auto copy_out = RunToIdle(*c, &copy_ns);
  EXPECT_EQ(copy_out[4].size(), 2u);
  EXPECT_EQ(copy_out[4][0].cached_tokens, 32u);  // r1's blocks, cached in the copy
  // The original has no request 4 and produces what the copy did for 1..3, step for step.
  Engine twin(cfg);
  ASSERT_TRUE(twin.AddRequest({1, Tokens(250, 1), 6}));
  ASSERT_TRUE(twin.AddRequest({2, Tokens(40, 1), 3}));
  ASSERT_TRUE(twin.AddRequest({3, Tokens(90, 500), 4}));
  twin.Step();
  std::unique_ptr<Engine> c2 = twin.Clone();
  auto e_out = RunToIdle(e);
  auto c2_out = RunToIdle(*c2);
  EXPECT_EQ(e_out.count(4), 0u);
  ASSERT_EQ(e_out.size(), 3u);
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_EQ(e_out[id].size(), c2_out[id].size()) << id;
    for (size_t k = 0; k < e_out[id].size(); ++k) {
      EXPECT_EQ(e_out[id][k].token, c2_out[id][k].token);
      EXPECT_EQ(e_out[id][k].cached_tokens, c2_out[id][k].cached_tokens);
      EXPECT_EQ(e_out[id][k].finished, c2_out[id][k].finished);
    }
  }
  EXPECT_TRUE(twin.HasWork());  // the clone's steps did not advance the twin
}

TEST(EngineTest, ChunkedPrefillSpreadsALongPromptOverSteps) {
  EngineConfig cfg = SmallConfig();
  cfg.max_num_batched_tokens = 100;
  Engine e(cfg);
  ASSERT_TRUE(e.AddRequest({1, Tokens(250, 1), 1}));
  StepResult s1 = e.Step();
  EXPECT_EQ(s1.prefill_tokens, 100u);
  EXPECT_TRUE(s1.outputs.empty());
  StepResult s2 = e.Step();
  EXPECT_EQ(s2.prefill_tokens, 100u);
  StepResult s3 = e.Step();
  EXPECT_EQ(s3.prefill_tokens, 50u);
  ASSERT_EQ(s3.outputs.size(), 1u);
  EXPECT_TRUE(s3.outputs[0].finished);
  EXPECT_EQ(s1.duration_ns, cfg.timing.StepNs(100, 0, 0.1));
}

TEST(EngineTest, StepTimeFollowsTheTimingModel) {
  EngineConfig cfg = SmallConfig();
  cfg.timing.speedup = 2;
  Engine e(cfg);
  ASSERT_TRUE(e.AddRequest({1, Tokens(32, 1), 3}));
  StepResult prefill = e.Step();
  EXPECT_EQ(prefill.prefill_tokens, 32u);
  EXPECT_EQ(prefill.decode_seqs, 0u);
  EXPECT_EQ(prefill.duration_ns, cfg.timing.StepNs(32, 0, 32.0 / 1024));
  StepResult decode = e.Step();
  EXPECT_EQ(decode.prefill_tokens, 0u);
  EXPECT_EQ(decode.decode_seqs, 1u);
  EXPECT_EQ(decode.duration_ns, cfg.timing.StepNs(0, 1, 33.0 / 1024));
  EXPECT_NEAR(decode.duration_ns, cfg.timing.DecodeMs(33.0 / 1024) * 1e6 / 2, 1);
}

TEST(EngineTest, PreemptsWhenOutOfBlocksAndStillFinishesEverything) {
  EngineConfig cfg = SmallConfig();
  cfg.num_gpu_blocks = 10;  // 160 tokens
  Engine e(cfg);
  // Two sequences growing to 30 + 60 tokens each need 6 blocks: 12 > 10.
  ASSERT_TRUE(e.AddRequest({1, Tokens(30, 1), 60}));
  ASSERT_TRUE(e.AddRequest({2, Tokens(30, 1000), 60}));
  auto out = RunToIdle(e);
  EXPECT_GT(e.stats().preemptions, 0u);
  ASSERT_EQ(out[1].size(), 60u);
  ASSERT_EQ(out[2].size(), 60u);
  for (uint32_t i = 0; i < 60; ++i) {
    EXPECT_EQ(out[2][i].index, i);
    EXPECT_EQ(out[2][i].token, Engine::GeneratedToken(2, i, cfg.vocab_size));
  }
  EXPECT_EQ(e.cache().NumFree(), 10u);
}

TEST(EngineTest, EvictionEmitsRemovedForTheLeastRecentlyUsedPrefix) {
  EngineConfig cfg = SmallConfig();
  cfg.num_gpu_blocks = 6;
  Engine e(cfg);
  std::vector<TokenId> a = Tokens(33, 1), b = Tokens(33, 500), c = Tokens(33, 900);
  ASSERT_TRUE(e.AddRequest({1, a, 1}));
  RunToIdle(e);
  ASSERT_TRUE(e.AddRequest({2, b, 1}));
  RunToIdle(e);
  e.TakeEvents();
  // 6 blocks: a holds 2 cached + 1 partial, b the same; c needs 3 fresh blocks.
  ASSERT_TRUE(e.AddRequest({3, c, 1}));
  RunToIdle(e);
  std::vector<core::BlockHash> removed;
  for (const KvEvent& x : e.TakeEvents()) {
    if (x.kind == KvEvent::Kind::kBlockRemoved) {
      removed.insert(removed.end(), x.block_hashes.begin(), x.block_hashes.end());
    }
  }
  std::vector<core::BlockHash> ha = e.HashBlocks(a);
  // a's partial block (never cached) goes first, then a's tail, then a's head.
  EXPECT_EQ(removed, (std::vector<core::BlockHash>{ha[1], ha[0]}));
  EXPECT_EQ(e.CachedPrefixTokens(b), 32u);
  EXPECT_EQ(e.CachedPrefixTokens(a), 0u);
}

TEST(EngineTest, RejectsBadRequestsAndAbortReleasesBlocks) {
  EngineConfig cfg = SmallConfig();
  Engine e(cfg);
  EXPECT_FALSE(e.AddRequest({1, {}, 1}));
  EXPECT_FALSE(e.AddRequest({1, Tokens(4, 1), 0}));
  EXPECT_FALSE(e.AddRequest({1, Tokens(64 * 16, 1), 1}));  // can never fit
  ASSERT_TRUE(e.AddRequest({1, Tokens(40, 1), 100}));
  EXPECT_FALSE(e.AddRequest({1, Tokens(40, 1), 1}));  // live id
  e.Step();
  EXPECT_LT(e.cache().NumFree(), 64u);
  EXPECT_TRUE(e.Abort(1));
  EXPECT_FALSE(e.Abort(1));
  EXPECT_EQ(e.cache().NumFree(), 64u);
  EXPECT_FALSE(e.HasWork());
}

TEST(EngineTest, ResetClearsTheCacheOnlyWhenIdle) {
  Engine e(SmallConfig());
  std::vector<TokenId> a = Tokens(40, 1);
  ASSERT_TRUE(e.AddRequest({1, a, 3}));
  e.Step();
  EXPECT_FALSE(e.ResetPrefixCache());
  RunToIdle(e);
  e.TakeEvents();
  EXPECT_TRUE(e.ResetPrefixCache());
  std::vector<KvEvent> ev = e.TakeEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kAllBlocksCleared);
  EXPECT_EQ(e.CachedPrefixTokens(a), 0u);
}

TEST(EngineTest, ContinuousBatchingRespectsMaxNumSeqs) {
  EngineConfig cfg = SmallConfig();
  cfg.max_num_seqs = 2;
  Engine e(cfg);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(e.AddRequest({i, Tokens(10, i * 100), 4}));
  e.Step();
  EXPECT_EQ(e.NumRunning(), 2u);
  EXPECT_EQ(e.NumWaiting(), 3u);
  auto out = RunToIdle(e);
  EXPECT_EQ(out.size(), 5u);
}

}  // namespace
}  // namespace infera::sim

namespace infera::sim {
namespace {

TEST(EngineTest, TracksRouterHashesOfCachedBlocksWhenAsked) {
  EngineConfig cfg = SmallConfig();
  cfg.track_router_hashes = true;
  Engine e(cfg);
  std::vector<core::TokenId> p = Tokens(40, 3);
  ASSERT_TRUE(e.AddRequest({1, p, 1}));
  RunToIdle(e);
  std::vector<core::BlockHash> router = core::HashChain(p, 16);
  std::vector<core::BlockHash> engine = e.HashBlocks(p);
  auto blocks = e.cache().CachedBlocks();
  std::sort(blocks.begin(), blocks.end());
  std::vector<std::pair<core::BlockHash, core::BlockHash>> want = {{engine[0], router[0]},
                                                                   {engine[1], router[1]}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(blocks, want);
}

}  // namespace
}  // namespace infera::sim

namespace infera::sim {
namespace {

// A PD decode leg: the prompt's KV arrives, so the first step runs one token, timed as
// a decode step, and the transferred blocks are cached (and published) here.
TEST(EngineTest, RemotePrefillRunsOnlyTheLastPromptTokenAsADecodeStep) {
  Engine e(SmallConfig());
  EngineRequest req{1, Tokens(200, 1), 3};
  req.remote_prefill = true;
  ASSERT_TRUE(e.AddRequest(req));
  StepResult first = e.Step();
  EXPECT_EQ(first.prefill_tokens, 0u);
  EXPECT_EQ(first.decode_seqs, 1u);
  ASSERT_EQ(first.outputs.size(), 1u);
  EXPECT_EQ(first.outputs[0].index, 0u);
  EXPECT_EQ(first.outputs[0].cached_tokens, 0u);  // nothing was cached locally
  size_t stored = 0;
  for (const KvEvent& ev : e.TakeEvents()) {
    if (ev.kind == KvEvent::Kind::kBlockStored) stored += ev.block_hashes.size();
  }
  EXPECT_EQ(stored, 200u / 16);  // every full prompt block, as the transfer filled them
  RunToIdle(e);
  // The same prompt computed locally pays a prefill of all its tokens.
  Engine local(SmallConfig());
  ASSERT_TRUE(local.AddRequest({1, Tokens(200, 1), 3}));
  StepResult computed = local.Step();
  EXPECT_EQ(computed.prefill_tokens, 200u);
  EXPECT_GT(computed.duration_ns, first.duration_ns);
}

TEST(EngineTest, RemotePrefillReportsTheLocalPrefixHit) {
  Engine e(SmallConfig());
  ASSERT_TRUE(e.AddRequest({1, Tokens(64, 1), 1}));
  RunToIdle(e);
  EngineRequest req{2, Tokens(100, 1), 2};
  req.remote_prefill = true;
  ASSERT_TRUE(e.AddRequest(req));
  auto out = RunToIdle(e);
  EXPECT_EQ(out[2][0].cached_tokens, 64u);
  EXPECT_EQ(out[2].size(), 2u);
}

}  // namespace
}  // namespace infera::sim
