#include "sim/engine.h"

#include <algorithm>
#include <cassert>

#include "base/splitmix64.h"
#include "core/hashing.h"

namespace infera::sim {

struct Engine::Seq {
  uint64_t id = 0;
  std::vector<core::TokenId> tokens;  // prompt, then generated tokens
  size_t prompt_len = 0;
  size_t max_tokens = 1;
  size_t outputs = 0;
  size_t computed = 0;                         // tokens whose KV is computed (or cached)
  std::vector<core::BlockHash> hashes;         // engine hashes of the full blocks of `tokens`
  std::vector<core::BlockHash> router_hashes;  // only with track_router_hashes
  std::vector<BlockId> blocks;
  size_t cached_blocks = 0;  // blocks[0, cached_blocks) are registered in the cache
  uint32_t cached_tokens = 0;
  bool admitted = false;
  bool remote_prefill = false;  // EngineRequest::remote_prefill, until first admission
  bool remote_step = false;     // this step runs the last prompt token of a remote prefill
  CacheKeys keys;
  core::HashKeys router_keys;  // the router's view of `keys` (track_router_hashes)
};

Engine::Engine(const EngineConfig& config)
    : config_(config), cache_(config.num_gpu_blocks, config.block_size) {}

Engine::~Engine() = default;

Engine::Engine(const EngineConfig& config, const KvCache& cache)
    : config_(config), cache_(cache) {}

std::unique_ptr<Engine> Engine::Clone() const {
  std::unique_ptr<Engine> copy(new Engine(config_, cache_));  // the private constructor
  copy->stats_ = stats_;
  for (const auto& [id, seq] : seqs_) copy->seqs_[id] = std::make_unique<Seq>(*seq);
  // running_ and waiting_ point into seqs_: the copy's point into its own.
  copy->running_.reserve(running_.size());
  for (const Seq* seq : running_) copy->running_.push_back(copy->seqs_.at(seq->id).get());
  for (const Seq* seq : waiting_) copy->waiting_.push_back(copy->seqs_.at(seq->id).get());
  return copy;
}

core::TokenId Engine::GeneratedToken(uint64_t request_id, uint32_t index, uint32_t vocab_size) {
  const uint64_t z = base::SplitMix64Finalize(request_id * 0x9e3779b97f4a7c15ULL + index +
                                              0x632be59bd9b4e019ULL);
  return static_cast<core::TokenId>(z % (vocab_size == 0 ? 1 : vocab_size));
}

std::vector<core::BlockHash> Engine::HashBlocks(std::span<const core::TokenId> tokens,
                                                const CacheKeys& keys) const {
  const size_t bs = config_.block_size;
  std::vector<core::BlockHash> out;
  out.reserve(tokens.size() / bs);
  core::BlockHash parent = 0;
  for (size_t i = 0; i + bs <= tokens.size(); i += bs) {
    const std::vector<std::string> extra = keys.ExtraKeys(i / bs);
    parent = EngineHash(parent, tokens.subspan(i, bs), config_.hash_seed, extra);
    out.push_back(parent);
  }
  return out;
}

size_t Engine::CachedPrefixTokens(std::span<const core::TokenId> prompt,
                                  const CacheKeys& keys) const {
  if (!config_.enable_prefix_caching || prompt.empty()) return 0;
  const size_t max_blocks = (prompt.size() - 1) / config_.block_size;
  std::vector<core::BlockHash> hashes =
      HashBlocks(prompt.first(std::min(prompt.size(), max_blocks * config_.block_size)), keys);
  return cache_.CountCachedPrefix(hashes) * config_.block_size;
}

bool Engine::AddRequest(EngineRequest request) {
  const size_t bs = config_.block_size;
  if (request.prompt.empty() || request.max_tokens == 0 || seqs_.contains(request.id)) {
    return false;
  }
  const size_t max_len = request.prompt.size() + request.max_tokens;
  if ((max_len + bs - 1) / bs > config_.num_gpu_blocks) return false;
  auto seq = std::make_unique<Seq>();
  seq->id = request.id;
  seq->prompt_len = request.prompt.size();
  seq->max_tokens = request.max_tokens;
  seq->remote_prefill = request.remote_prefill;
  seq->tokens = std::move(request.prompt);
  seq->tokens.reserve(max_len);
  seq->keys = std::move(request.keys);
  if (!seq->keys.cache_salt.empty()) seq->router_keys.salt = core::KeyDigest(seq->keys.cache_salt);
  if (!seq->keys.lora_name.empty()) {
    seq->router_keys.adapter = core::KeyDigest(seq->keys.lora_name);
  }
  seq->hashes = HashBlocks(seq->tokens, seq->keys);
  waiting_.push_back(seq.get());
  seqs_.emplace(seq->id, std::move(seq));
  return true;
}

bool Engine::Abort(uint64_t request_id) {
  auto it = seqs_.find(request_id);
  if (it == seqs_.end()) return false;
  Seq* seq = it->second.get();
  if (auto r = std::find(running_.begin(), running_.end(), seq); r != running_.end()) {
    running_.erase(r);
  } else if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end()) {
    waiting_.erase(w);
  }
  cache_.Release(seq->blocks);
  seqs_.erase(it);
  return true;
}

size_t Engine::BlocksNeeded(const Seq& seq, size_t tokens) const {
  const size_t bs = config_.block_size;
  const size_t want = (tokens + bs - 1) / bs;
  return want > seq.blocks.size() ? want - seq.blocks.size() : 0;
}

void Engine::Preempt(Seq* seq) {
  cache_.Release(seq->blocks);
  seq->blocks.clear();
  seq->computed = 0;
  seq->cached_blocks = 0;
  waiting_.push_front(seq);
  ++stats_.preemptions;
}

void Engine::CacheFullBlocks(Seq* seq) {
  const size_t bs = config_.block_size;
  const size_t full = std::min(seq->computed, seq->tokens.size()) / bs;
  if (full <= seq->cached_blocks) return;
  std::span<const core::TokenId> tokens(seq->tokens);
  while (seq->hashes.size() < full) {
    const size_t i = seq->hashes.size();
    const core::BlockHash parent = i == 0 ? 0 : seq->hashes[i - 1];
    const std::vector<std::string> extra = seq->keys.ExtraKeys(i);
    seq->hashes.push_back(EngineHash(parent, tokens.subspan(i * bs, bs), config_.hash_seed, extra));
  }
  if (config_.track_router_hashes && seq->router_hashes.size() < full) {
    const size_t i = seq->router_hashes.size();
    const core::BlockHash parent = i == 0 ? 0 : seq->router_hashes[i - 1];
    core::AppendChain(tokens.subspan(i * bs, (full - i) * bs), bs, parent, seq->router_keys,
                      seq->router_hashes);
  }
  if (config_.enable_prefix_caching) {
    const size_t first = seq->cached_blocks;
    std::span<const core::BlockHash> aux;
    if (config_.track_router_hashes) {
      aux = std::span<const core::BlockHash>(seq->router_hashes).subspan(first, full - first);
    }
    std::optional<core::BlockHash> parent;
    if (first > 0) parent = seq->hashes[first - 1];
    cache_.Cache(std::span<const BlockId>(seq->blocks).subspan(first, full - first),
                 std::span<const core::BlockHash>(seq->hashes).subspan(first, full - first), parent,
                 tokens.subspan(first * bs, (full - first) * bs), aux, seq->keys, first);
  }
  seq->cached_blocks = full;
}

void Engine::FinishSeq(Seq* seq) {
  cache_.Release(seq->blocks);
  ++stats_.finished;
  seqs_.erase(seq->id);
}

StepResult Engine::Step() {
  const size_t bs = config_.block_size;
  StepResult result;
  ++stats_.steps;
  size_t budget = config_.max_num_batched_tokens;
  struct Scheduled {
    Seq* seq;
    size_t tokens;
  };
  std::vector<Scheduled> scheduled;
  scheduled.reserve(running_.size() + 8);

  // 1. Running sequences, in admission order; preempt from the back when out of blocks.
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq* s = running_[i];
    const size_t n = std::min(s->tokens.size() - s->computed, budget);
    size_t need = BlocksNeeded(*s, s->computed + n);
    bool self_preempted = false;
    while (need > cache_.NumFree()) {
      Seq* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      preempted = true;
      ++result.preempted;
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    cache_.Allocate(need, s->blocks);
    scheduled.push_back({s, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting sequences, FIFO, unless this step had to preempt.
  while (!preempted && !waiting_.empty() && running_.size() < config_.max_num_seqs && budget > 0) {
    Seq* s = waiting_.front();
    const size_t total = s->tokens.size();
    size_t hit_blocks = 0;
    if (config_.enable_prefix_caching) {
      const size_t max_hit = std::min((total - 1) / bs, s->hashes.size());
      hit_blocks = cache_.CountCachedPrefix(std::span(s->hashes).first(max_hit));
    }
    const size_t hit_tokens = hit_blocks * bs;
    // A remote prefill's KV arrives; the last prompt token is run here.
    const bool remote = !s->admitted && s->remote_prefill;
    const size_t computed = remote ? std::max(hit_tokens, total - 1) : hit_tokens;
    const size_t n = std::min(total - computed, budget);
    const size_t need_new = (computed + n + bs - 1) / bs - hit_blocks;
    const size_t free_after = cache_.NumFree() - cache_.CountFreeAmongCached(s->hashes, hit_blocks);
    if (need_new > free_after) break;
    waiting_.pop_front();
    cache_.AcquireCached(s->hashes, hit_blocks, s->blocks);
    cache_.Allocate(need_new, s->blocks);
    s->computed = computed;
    s->cached_blocks = hit_blocks;
    if (!s->admitted) {
      s->admitted = true;
      s->cached_tokens = static_cast<uint32_t>(hit_tokens);
      stats_.prompt_tokens += s->prompt_len;
      stats_.cached_tokens += hit_tokens;
      s->remote_step = remote;
    }
    running_.push_back(s);
    scheduled.push_back({s, n});
    budget -= n;
  }

  // 3. Timing of the batch.
  size_t occupied = 0;
  for (const Scheduled& sc : scheduled) {
    const Seq& s = *sc.seq;
    const bool decoding =
        (s.outputs > 0 || s.remote_step) && sc.tokens == 1 && s.computed + 1 == s.tokens.size();
    if (decoding) {
      ++result.decode_seqs;
    } else {
      result.prefill_tokens += sc.tokens;
    }
  }
  for (const Seq* s : running_) occupied += s->computed;
  for (const Scheduled& sc : scheduled) occupied += sc.tokens;
  const double capacity = static_cast<double>(config_.num_gpu_blocks * bs);
  const double occupancy = std::min(1.0, static_cast<double>(occupied) / capacity);
  result.duration_ns = config_.timing.StepNs(result.prefill_tokens, result.decode_seqs, occupancy);

  // 4. Execute: advance, cache full blocks, sample.
  std::vector<Seq*> finished;
  for (const Scheduled& sc : scheduled) {
    Seq* s = sc.seq;
    s->computed += sc.tokens;
    s->remote_step = false;
    CacheFullBlocks(s);
    if (s->computed < s->tokens.size()) continue;  // mid-prefill chunk
    TokenOutput out;
    out.request_id = s->id;
    out.index = static_cast<uint32_t>(s->outputs);
    out.token = GeneratedToken(s->id, out.index, config_.vocab_size);
    out.prompt_tokens = static_cast<uint32_t>(s->prompt_len);
    out.cached_tokens = s->cached_tokens;
    s->tokens.push_back(out.token);
    ++s->outputs;
    out.finished = s->outputs >= s->max_tokens;
    if (out.finished) finished.push_back(s);
    result.outputs.push_back(out);
  }
  if (!finished.empty()) {
    std::erase_if(running_, [&](Seq* s) {
      return std::find(finished.begin(), finished.end(), s) != finished.end();
    });
    for (Seq* s : finished) FinishSeq(s);
  }
  return result;
}

bool Engine::ResetPrefixCache() {
  if (!running_.empty()) return false;
  cache_.Clear();
  return true;
}

}  // namespace infera::sim
