// Flag groups of the routing decision: policy, cost, prompts.
// Each function is one entry of kFlagGroups (flag_table.cc); README.md says how a flag
// is added.
#include "router/config/router_flags.h"

namespace infera::router::config {

// The routing policy, PD disaggregation, session affinity and decode input demand.
void AddPolicyFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--router-policy", f.policy,
                 "kv-aware | round-robin | random | least-load | dynamo | lmetric | llm-d | "
                 "sglang (the last four: the peers' policies for A/B, doc/peers.md)")
      ->capture_default_str();
  app.add_option("--kv-overlap-weight", o.policy.overlap_weight,
                 "Weight of missed prompt blocks against load (0: pure load balance)")
      ->capture_default_str();
  app.add_option("--kv-prefill-overlap-weight", f.prefill_overlap_weight,
                 "Overlap weight for prefill picks (default: --kv-overlap-weight)");
  app.add_option("--kv-decode-overlap-weight", f.decode_overlap_weight,
                 "Overlap weight for decode picks (default: --kv-overlap-weight)");
  app.add_option("--pd-min-uncached-tokens", o.pd.min_uncached_tokens,
                 "PD: below this many uncached prompt tokens on the best prefill worker, the "
                 "decode worker serves the request alone (0: always disaggregate)")
      ->capture_default_str();
  app.add_option("--pd-prefill-guard-release", f.pd_guard_release,
                 "PD: release the prefill leg's load when it answers (prefill) or when the "
                 "request ends (completion; serial protocols always release at prefill)")
      ->capture_default_str();
  app.add_option("--session-affinity", f.session_affinity,
                 "off | prefill (keep a session's prefill target, or its target in a mixed "
                 "fleet) | both (its decode target too); the session is the body's session_id "
                 "or prompt_cache_key, or the X-Session-Id header")
      ->capture_default_str();
  app.add_option("--session-affinity-max-sessions", o.sessions.max_sessions,
                 "Sessions kept bound; the least recently used goes first")
      ->capture_default_str();
  app.add_option("--session-affinity-ttl-s", f.session_ttl_s,
                 "A session unused this long is forgotten (seconds)")
      ->capture_default_str();
  f.demand_flag = app.add_option(
      "--decode-input-demand", f.demand_mode,
      "PD: decode picks by in-flight input tokens: off | shadow (suggest and count) | on "
      "(requires --router-policy kv-aware; env INFERA_DECODE_INPUT_DEMAND; default off)");
  f.weight_flag = app.add_option(
      "--decode-request-weight", f.demand_weight,
      "Decode input demand: cost += W x requests the target holds (requires "
      "--decode-input-demand shadow|on; env INFERA_DECODE_REQUEST_WEIGHT; default 0)");
}

// The cost function's terms (doc/selection.md).
void AddCostFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--kv-host-hit-weight", o.policy.host_hit_weight,
                 "Credit of a host-tier cache hit relative to a device hit")
      ->capture_default_str();
  app.add_option("--kv-disk-hit-weight", o.policy.disk_hit_weight,
                 "Credit of a disk-tier cache hit relative to a device hit")
      ->capture_default_str();
  app.add_option("--kv-recent-decay", o.policy.recent_decay,
                 "Decay of recently-routed blocks per pick (0: off; --load-term spec)")
      ->capture_default_str();
  app.add_option("--load-term", f.load_term,
                 "work (pending prefill + KV pressure) | spec (active blocks until completion)")
      ->capture_default_str();
  app.add_option("--kv-pressure-threshold", o.policy.kv_pressure_threshold,
                 "work load term: a worker's KV use (fraction of its capacity) above which "
                 "in-flight blocks cost (doc/selection.md)")
      ->capture_default_str();
  app.add_option("--load-queue-scaling", o.policy.load_queue_scaling,
                 "work load term: divide it by 1 + the candidates' mean requests in prefill, "
                 "so a miss weighs 1 / (1 - utilisation) (true/false)")
      ->capture_default_str();
  app.add_option("--kv-pressure-slope", o.policy.kv_pressure_slope,
                 "work load term: cost per in-flight block above --kv-pressure-threshold "
                 "(0: no KV pressure term)")
      ->capture_default_str();
  app.add_option("--kv-pressure-yield", o.policy.kv_pressure_yield,
                 "work load term: a mixed or prefill pick drops the KV-pressure term when "
                 "every candidate is past its threshold (true/false, doc/selection.md)")
      ->capture_default_str();
  app.add_option("--kv-decode-load", o.policy.decode_load_blocks,
                 "work load term: blocks of cost of a worker whose KV capacity is full of its "
                 "in-flight requests' prompt blocks (the decode step's share of a new "
                 "request's wait; 0: off, doc/selection.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-seq-wait-load", o.policy.seq_wait_blocks,
                 "work load term: blocks of cost per request a new one would wait behind for a "
                 "sequence slot on a worker at its max_num_seqs (--worker-max-num-seqs; not "
                 "divided by the queue scaling; 0: off, doc/selection.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kv-timed-prefill", o.policy.timed_prefill,
                 "work load term: count each pending prefill less the progress its time since "
                 "dispatch buys at the worker's prefill rate, learned online from first-token "
                 "times (a FIFO queue; true/false, doc/selection.md)")
      ->capture_default_str();
  app.add_option("--kv-prefill-rate", o.policy.prefill_rate,
                 "--kv-timed-prefill: the learned prefill rate's seed, blocks per second")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-inflight-credit", o.policy.inflight_credit,
                 "kv-aware: weight of a worker's in-flight run of the prompt (blocks past its "
                 "view's hits that its in-flight requests hold), credited as hits (0: off; "
                 "doc/selection.md \"In-flight credit\")")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--kv-inflight-holders", o.policy.inflight_credit_holders,
                 "--kv-inflight-credit: credited while fewer than this many in-flight requests "
                 "on the worker hold the prompt's first block")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--kv-inflight-share-window", o.policy.inflight_share_window,
                 "--kv-inflight-credit: only while the prompt's first block was that of at most "
                 "this many / candidates of the last this many picks (a prompt one worker can "
                 "serve; 0: no gate)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--kv-timed-prefill-floor", o.policy.timed_prefill_floor,
                 "--kv-timed-prefill: the share of a dispatched prefill's missed blocks counted "
                 "until its first token or last block confirms it, however long ago it was "
                 "dispatched (0-1)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--worker-max-num-seqs", o.worker_max_num_seqs,
                 "every worker's max_num_seqs (vLLM's --max-num-seqs), for --kv-seq-wait-load "
                 "(0: unknown, no sequence-slot term)")
      ->capture_default_str();
}

// Prompt tokenization, the random policy's seed and render parity.
void AddPromptFlags(CLI::App& app, RouterFlags& f) {
  RouterOptions& o = f.options;
  app.add_option("--router-tokenizer-path,--kv-tokenizer-path", o.tokenizer_path,
                 "Directory with tokenizer.json and tokenizer_config.json (chat template), or "
                 "a Hugging Face model id (Qwen/Qwen3-0.6B) found offline in the hub cache "
                 "($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); without it prompts "
                 "are estimated as bytes/4 and only integer-array prompts get cache hits");
  app.add_option("--max-tokenize-bytes", o.max_tokenize_bytes,
                 "Prompts longer than this (completions text, or the chat body and its "
                 "rendering) are not tokenized: sized by the bytes/4 estimate (0: no limit)")
      ->capture_default_str();
  app.add_option("--tokenize-threads", o.tokenize_threads,
                 "Threads rendering and tokenizing prompts of 16 KiB and more, and parsing "
                 "and translating request bodies of 16 KiB and more, off the event loops "
                 "(0: max(1, cores / 2))")
      ->capture_default_str();
  f.seed_flag =
      app.add_option("--router-random-seed", f.random_seed,
                     "Seed of --router-policy random (default: from the OS, logged at start)");
  app.add_option("--render-parity-interval-s", f.parity_interval_s,
                 "Re-probe every worker's /tokenize this often to check it renders chats like "
                 "the router (workers are probed when discovered; 0: only then)")
      ->capture_default_str();
}

}  // namespace infera::router::config
