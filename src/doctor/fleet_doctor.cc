#include "doctor/fleet_doctor.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <zmq.hpp>

#include "event_wire/dp_endpoint.h"
#include "event_wire/zmq_frames.h"
#include "events/event_decoder.h"
#include "http/client.h"
#include "http/io_pool.h"
#include "http/url.h"
#include "router/encode/prompt_encoder.h"
#include "router/work_pool.h"
#include "router/encode/render_parity.h"
#include "router/metrics/router_metrics.h"

namespace infera::doctor {
namespace {

namespace asio = http::asio;
using Clock = std::chrono::steady_clock;
using discovery::WorkerRecord;

constexpr uint64_t kMaxAnswerBytes = 4u << 20;

std::string NowIso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

CheckResult Result(const WorkerRecord& r, const char* check, Verdict verdict, std::string detail,
                   std::string cause = "", std::string fix = "") {
  return CheckResult{r.worker_id,      check,         verdict, std::move(detail),
                     std::move(cause), std::move(fix)};
}

// One SUB per dp rank of a worker, all topics (the topic check is ours).
struct RankSubs {
  std::vector<std::string> endpoints;
  std::vector<events::MonitoredSub> subs;
  std::vector<bool> connected;
};

// Reads the monitor's queued events; true once one is ZMQ_EVENT_CONNECTED.
bool ReadConnected(zmq::socket_t& monitor) {
  bool connected = false;
  for (int i = 0; i < 64; ++i) {
    std::vector<zmq::message_t> frames = events::RecvMultipart(monitor);
    if (frames.empty()) break;
    if (frames[0].size() < 2) continue;
    const auto* p = static_cast<const uint8_t*>(frames[0].data());
    if (static_cast<uint16_t>(p[0] | (p[1] << 8)) == ZMQ_EVENT_CONNECTED) connected = true;
  }
  return connected;
}

// What one worker's event streams showed while the doctor listened.
struct StreamWatch {
  ProbeSighting sighting;
  std::set<std::string> topics;       // every topic frame seen
  size_t messages = 0;                // messages on any topic
  size_t accepted_messages = 0;       // on a topic the router's filter accepts
  uint32_t first_block_size = 0;      // passive: tokens per block of the first BlockStored
  std::optional<uint64_t> probe_seq;  // seq of the batch that carried the probe's nonce
  std::string probe_endpoint;
};

}  // namespace

struct FleetDoctor::Impl {
  explicit Impl(DoctorOptions o) : options(std::move(o)), pool(1), ctx(1) {
    pool.Start();
    std::random_device rd;
    nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  ~Impl() { pool.Stop(); }

  absl::StatusOr<http::ClientResponse> Fetch(const std::string& url, std::string method,
                                             std::string target, std::string body) {
    absl::StatusOr<http::Endpoint> ep = http::ParseHttpUrl(url);
    if (!ep.ok()) return ep.status();
    std::promise<absl::StatusOr<http::ClientResponse>> done;
    const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
    asio::co_spawn(
        pool.executor(0),
        [&]() -> http::Awaitable<void> {
          http::Client client(co_await asio::this_coro::executor);
          http::Headers headers;
          if (!body.empty()) headers.Add("Content-Type", "application/json");
          auto r = co_await client.Fetch(*ep, method, target, headers, body, deadline);
          if (r.ok() && r->body.size() > kMaxAnswerBytes) {
            r = absl::ResourceExhaustedError("answer larger than 4 MiB");
          }
          done.set_value(std::move(r));
        },
        asio::detached);
    return done.get_future().get();
  }

  bool Stopping() const { return options.stop != nullptr && options.stop->load(); }

  // Opens the SUBs and waits (bounded) until each is connected.
  RankSubs Subscribe(const WorkerRecord& r) {
    RankSubs s;
    for (uint32_t i = 0; i < std::max<uint32_t>(1, r.dp_size); ++i) {
      s.endpoints.push_back(events::OffsetEndpointPort(r.kv_events_endpoint, r.dp_rank + i));
      events::SubOptions sub_options;
      sub_options.topic = "";
      s.subs.push_back(events::OpenMonitoredSub(ctx, s.endpoints.back(), sub_options));
      s.connected.push_back(false);
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
    while (Clock::now() < deadline && !Stopping()) {
      std::vector<zmq::pollitem_t> items;
      for (auto& sub : s.subs) items.push_back({sub.monitor->handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items, std::chrono::milliseconds(50));
      bool all = true;
      for (size_t i = 0; i < s.subs.size(); ++i) {
        if (!s.connected[i] && ReadConnected(*s.subs[i].monitor)) s.connected[i] = true;
        all = all && s.connected[i];
      }
      if (all) break;
    }
    return s;
  }

  // Reads messages from every SUB until `done` holds or `until` passes.
  template <typename Done>
  void Listen(RankSubs& s, const ProbePrompt* probe, StreamWatch& w, Clock::time_point until,
              Done done) {
    events::DecodedBatch batch;
    while (Clock::now() < until && !done() && !Stopping()) {
      std::vector<zmq::pollitem_t> items;
      for (auto& sub : s.subs) items.push_back({sub.sub->handle(), 0, ZMQ_POLLIN, 0});
      zmq::poll(items, std::chrono::milliseconds(20));
      for (size_t i = 0; i < s.subs.size(); ++i) {
        for (int k = 0; k < 256; ++k) {
          std::vector<zmq::message_t> frames = events::RecvMultipart(*s.subs[i].sub);
          if (frames.empty()) break;
          if (frames.size() != 3 || frames[1].size() != 8) continue;
          ++w.messages;
          std::string topic(static_cast<const char*>(frames[0].data()), frames[0].size());
          w.topics.insert(topic);
          if (!topic.starts_with(options.kv_events_topic)) continue;
          ++w.accepted_messages;
          const auto* data = static_cast<const uint8_t*>(frames[2].data());
          if (!events::DecodeEventBatch({data, frames[2].size()}, batch).ok()) continue;
          const bool nonce_before = w.sighting.nonce_seen;
          for (const events::DecodedEvent& e : batch.events) {
            if (e.type != events::EventType::kStored || !e.usable) continue;
            StoredEvent stored{
                batch.HashesOf(e), batch.TokensOf(e),
                e.has_parent ? std::optional<core::BlockHash>(e.parent_hash) : std::nullopt,
                e.block_size};
            if (w.first_block_size == 0 && e.hash_count > 0) {
              w.first_block_size = e.block_size > 0 ? e.block_size : e.token_count / e.hash_count;
            }
            if (probe != nullptr) {
              AddSighting(*probe, stored, w.sighting);
            } else {
              ++w.sighting.stored_events;
            }
          }
          if (!nonce_before && w.sighting.nonce_seen) {
            w.probe_seq = events::ReadBE64(frames[1]);
            w.probe_endpoint = s.endpoints[i];
          }
        }
      }
    }
  }

  void CheckEvents(const WorkerRecord& r, std::vector<CheckResult>& out);
  void CheckRenderParity(const WorkerRecord& r, std::vector<CheckResult>& out);
  void LoadFingerprints();

  DoctorOptions options;
  http::IoPool pool;
  zmq::context_t ctx;
  uint64_t nonce = 0;
  bool router_checked = false;
  std::optional<router::ProbeRendering> rendering;
  std::unique_ptr<router::RouterMetrics> metrics;
  std::unique_ptr<router::WorkPool> work_pool;  // (declared before the encoder using it)
  std::unique_ptr<router::PromptEncoder> encoder;
  bool fingerprints_loaded = false;
  std::string fingerprints_error;
  std::map<std::string, Fingerprint> recorded, seen;
};

FleetDoctor::FleetDoctor(DoctorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
FleetDoctor::~FleetDoctor() = default;

std::vector<CheckResult> FleetDoctor::CheckRouter() {
  Impl& m = *impl_;
  m.router_checked = true;
  std::vector<CheckResult> out;
  CheckResult tok{"", "router-tokenizer", Verdict::kOk, "", "", ""};
  if (m.options.tokenizer_path.empty()) {
    tok.verdict = Verdict::kFail;
    tok.detail = "no --router-tokenizer-path";
    tok.cause =
        "the router cannot tokenize prompts: chats and text completions are sized by a "
        "bytes/4 estimate and never hashed, so only integer-array prompts can get cache hits";
    tok.fix =
        "--router-tokenizer-path DIR (the model's tokenizer.json and tokenizer_config.json, "
        "the files the engines serve)";
    out.push_back(std::move(tok));
    return out;
  }
  if (!m.options.render_parity) {
    tok.detail = "--router-tokenizer-path " + m.options.tokenizer_path +
                 " (loaded by the router; render parity is its prober's, doc/render-parity.md)";
    out.push_back(std::move(tok));
    return out;
  }
  m.metrics = std::make_unique<router::RouterMetrics>(core::Policy::kKvAware);
  m.work_pool = std::make_unique<router::WorkPool>(1);
  m.encoder = std::make_unique<router::PromptEncoder>(router::PromptEncoderOptions{}, *m.metrics,
                                                      *m.work_pool);
  if (absl::Status s = m.encoder->Load(m.options.tokenizer_path); !s.ok()) {
    tok.verdict = Verdict::kFail;
    tok.detail = "cannot load " + m.options.tokenizer_path + ": " + std::string(s.message());
    tok.cause = "the router would not start with this directory";
    tok.fix =
        "--router-tokenizer-path DIR holding the model's tokenizer.json and "
        "tokenizer_config.json";
    out.push_back(std::move(tok));
    return out;
  }
  m.rendering = m.encoder->RenderProbe();
  if (!m.rendering) {
    tok.verdict = Verdict::kWarn;
    tok.detail = "tokenizer loaded, but no chat template renders the probe chat";
    tok.cause = "chat requests are estimated (bytes/4), not hashed: no cache hits for chats";
    tok.fix = "a tokenizer_config.json with chat_template (or chat_template.jinja) in " +
              m.options.tokenizer_path;
  } else {
    tok.detail = m.options.tokenizer_path + ": the probe chat renders to " +
                 std::to_string(m.rendering->ids.size()) + " tokens";
  }
  out.push_back(std::move(tok));
  return out;
}

std::vector<CheckResult> FleetDoctor::CheckWorker(const WorkerRecord& r) {
  Impl& m = *impl_;
  std::vector<CheckResult> out;
  const auto start = Clock::now();
  auto models = m.Fetch(r.url, "GET", "/v1/models", "");
  if (!models.ok()) {
    out.push_back(Result(
        r, "reachable", Verdict::kFail,
        "GET " + r.url + "/v1/models: " + models.status().ToString(),
        "the router cannot send this worker requests (every pick of it fails over, then opens "
        "its breaker)",
        "check the record's url (--worker URL,... or the etcd record) and that the engine "
        "listens there (vLLM/SGLang --host 0.0.0.0 --port P)"));
    for (const char* c : {"model", "kv-events", "block-size", "hash-stability", "render-parity"}) {
      out.push_back(Result(r, c, Verdict::kSkip, "worker unreachable"));
    }
    return out;
  }
  out.push_back(Result(r, "reachable", Verdict::kOk,
                       "GET /v1/models answered " + std::to_string(models->status) + " in " +
                           std::to_string(MsSince(start)) + " ms"));
  std::vector<std::string> served;
  const nlohmann::json list = nlohmann::json::parse(models->body, nullptr, false);
  if (list.is_object() && list.contains("data") && list["data"].is_array()) {
    for (const nlohmann::json& e : list["data"]) {
      if (e.is_object() && e.contains("id") && e["id"].is_string()) served.push_back(e["id"]);
    }
  }
  std::string served_text;
  for (const std::string& s : served) served_text += (served_text.empty() ? "" : ", ") + Quote(s);
  if (models->status / 100 != 2 || served.empty()) {
    out.push_back(Result(
        r, "model", Verdict::kFail,
        "GET /v1/models answered " + std::to_string(models->status) + " without a model list",
        "this is not an OpenAI-compatible engine endpoint, or it serves no model",
        "point the record's url at the engine's OpenAI server (vLLM `vllm "
        "serve`, SGLang `python -m sglang.launch_server`)"));
  } else if (!r.model_name.empty() &&
             std::find(served.begin(), served.end(), r.model_name) == served.end()) {
    out.push_back(
        Result(r, "model", Verdict::kFail,
               "serves " + served_text + ", the record says " + Quote(r.model_name),
               "requests for " + Quote(r.model_name) + " are refused by this worker (404)",
               "model_name=" + served.front() +
                   " in the record (--worker URL,model_name=" + served.front() +
                   ",...), or start the engine with --served-model-name " + r.model_name));
  } else {
    out.push_back(Result(r, "model", Verdict::kOk, "serves " + served_text));
  }
  m.CheckEvents(r, out);
  m.CheckRenderParity(r, out);
  return out;
}

void FleetDoctor::Impl::CheckEvents(const WorkerRecord& r, std::vector<CheckResult>& out) {
  if (options.kv_event_transport != "zmq") {
    const std::string why = "--kv-event-transport " + options.kv_event_transport +
                            ": the doctor reads engines' ZMQ streams only";
    for (const char* c : {"kv-events", "block-size", "hash-stability"}) {
      out.push_back(Result(r, c, Verdict::kSkip, why));
    }
    return;
  }
  if (r.kv_events_endpoint.empty()) {
    out.push_back(Result(r, "kv-events", Verdict::kFail, "the record has no kv_events_endpoint",
                         "the router never sees this worker's cache: it never gets a hit",
                         "kv_events_endpoint=tcp://HOST:5557 in the record (--worker URL,"
                         "kv_events_endpoint=tcp://HOST:5557,...) and on the engine " +
                             KvEventsFlag(r.engine, "")));
    out.push_back(Result(r, "block-size", Verdict::kSkip, "no event stream"));
    out.push_back(Result(r, "hash-stability", Verdict::kSkip, "no event stream"));
    return;
  }
  RankSubs subs;
  try {
    subs = Subscribe(r);
  } catch (const zmq::error_t& e) {
    out.push_back(Result(r, "kv-events", Verdict::kFail,
                         "cannot subscribe to " + r.kv_events_endpoint + ": " + e.what(),
                         "the router cannot subscribe either: no cache view for this worker",
                         "a tcp://HOST:PORT endpoint in the record's kv_events_endpoint"));
    out.push_back(Result(r, "block-size", Verdict::kSkip, "no event stream"));
    out.push_back(Result(r, "hash-stability", Verdict::kSkip, "no event stream"));
    return;
  }
  for (size_t i = 0; i < subs.subs.size(); ++i) {
    if (subs.connected[i]) continue;
    out.push_back(
        Result(r, "kv-events", Verdict::kFail,
               "no connection to " + subs.endpoints[i] + " within " +
                   std::to_string(options.timeout_ms) + " ms",
               "nothing publishes KV events there (events off, another port, or a host the router "
               "cannot reach): the router's view of this worker stays empty, it never gets a hit",
               "on the engine " + KvEventsFlag(r.engine, subs.endpoints[i]) +
                   ", and the record's kv_events_endpoint naming a host the router reaches"));
    out.push_back(Result(r, "block-size", Verdict::kSkip, "no event stream"));
    out.push_back(Result(r, "hash-stability", Verdict::kSkip, "no event stream"));
    return;
  }

  StreamWatch w;
  std::optional<ProbePrompt> probe;
  std::string probe_error;
  const auto start = Clock::now();
  if (options.probe) {
    // A SUB connected a moment ago may still miss the first message (its subscription
    // travels to the publisher after the handshake): up to three probes, each with a
    // fresh nonce, until the events show one.
    const auto until = start + std::chrono::milliseconds(options.timeout_ms);
    for (int attempt = 0; attempt < 3 && !w.sighting.nonce_seen && Clock::now() < until;
         ++attempt) {
      probe = MakeProbePrompt(nonce++);
      auto answer =
          Fetch(r.url, "POST", "/v1/completions", ProbeCompletionBody(*probe, r.model_name));
      if (!answer.ok() || answer->status / 100 != 2) {
        probe_error = answer.ok() ? "answered " + std::to_string(answer->status) + ": " +
                                        answer->body.substr(0, 200)
                                  : answer.status().ToString();
        break;
      }
      const auto wait_until = std::min(
          until,
          Clock::now() + std::chrono::milliseconds(std::max<int64_t>(200, options.timeout_ms / 3)));
      Listen(subs, &*probe, w, wait_until, [&] { return w.sighting.nonce_seen; });
    }
  } else {
    Listen(subs, nullptr, w, start + std::chrono::milliseconds(options.passive_wait_ms),
           [&] { return w.first_block_size != 0; });
  }
  std::string topics;
  for (const std::string& t : w.topics) topics += (topics.empty() ? "" : ", ") + Quote(t);
  const uint32_t router_bs = r.kv_block_size == 0 ? 16 : r.kv_block_size;
  uint32_t engine_bs = 0;

  if (!probe_error.empty()) {
    out.push_back(Result(r, "kv-events", Verdict::kFail,
                         "the probe completion (" +
                             std::to_string(kFixedTokens + kNonceTokens + 1) +
                             " token ids, max_tokens 1) failed: " + probe_error,
                         "the worker does not serve /v1/completions with token-id prompts for "
                         "the record's model: events cannot be checked",
                         "serve the record's model_name on the engine's OpenAI server"));
  } else if (w.messages > 0 && w.accepted_messages == 0) {
    out.push_back(Result(
        r, "kv-events", Verdict::kFail,
        std::to_string(w.messages) + " messages on topic(s) " + topics +
            ", none on the router's --kv-events-topic " + Quote(options.kv_events_topic),
        "the router's subscription filters out every event of this worker: its view stays "
        "empty, it never gets a hit",
        "router --kv-events-topic " + (w.topics.empty() ? std::string() : *w.topics.begin()) +
            " (or \"\" for every topic), or the engine's kv-events-config \"topic\""));
  } else if (options.probe && !w.sighting.nonce_seen) {
    if (w.sighting.stored_events > 0) {
      out.push_back(
          Result(r, "kv-events", Verdict::kFail,
                 std::to_string(w.sighting.stored_events) +
                     " BlockStored events arrived, none with the probe's token ids",
                 "the engine's events name other tokens than its requests carried (a salted or "
                 "remapped token stream): the router hashes the request's ids, so its view of this "
                 "worker never matches a request",
                 "publish the prompt's own token ids (no cache_salt or per-request extra keys on "
                 "prefix-shared traffic; infera-mock-engine: no --kv-events-hash-seed)"));
    } else {
      out.push_back(
          Result(r, "kv-events", Verdict::kFail,
                 "connected to " + subs.endpoints.front() + ", but no KV event within " +
                     std::to_string(options.timeout_ms) + " ms of the probe request",
                 "the engine does not publish KV events, or has prefix caching off: the router's "
                 "view of this worker stays empty, it never gets a hit",
                 "on the engine " + KvEventsFlag(r.engine, subs.endpoints.front())));
    }
  } else if (options.probe) {
    engine_bs = w.sighting.block_size;
    out.push_back(Result(r, "kv-events", Verdict::kOk,
                         "the probe's blocks were published on " + w.probe_endpoint +
                             " (topic(s) " + topics + ", seq " +
                             std::to_string(w.probe_seq.value_or(0)) + ") within " +
                             std::to_string(MsSince(start)) + " ms"));
  } else if (w.first_block_size != 0) {
    engine_bs = w.first_block_size;
    out.push_back(Result(r, "kv-events", Verdict::kOk,
                         "connected; traffic's events arrive (topic(s) " + topics + ")"));
  } else {
    out.push_back(Result(r, "kv-events", Verdict::kSkip,
                         "connected to every rank's stream; no BlockStored within " +
                             std::to_string(options.passive_wait_ms) +
                             " ms (no traffic yet: `infera-router doctor` sends a probe)"));
  }

  if (engine_bs == 0) {
    out.push_back(Result(r, "block-size", Verdict::kSkip, "no event of this worker to read"));
  } else if (engine_bs != router_bs) {
    out.push_back(Result(
        r, "block-size", Verdict::kFail,
        "the engine stores blocks of " + std::to_string(engine_bs) + " tokens; the router hashes " +
            std::to_string(router_bs) + " (the record's kv_block_size)",
        "the router re-chunks the engine's blocks in its own size: the engine-to-router hash "
        "map breaks, later events of a prefix have unknown parents and removals are lost, so "
        "the view shows blocks the engine does not hold and misses those it does",
        "on the engine " + BlockSizeFlag(r.engine, router_bs) +
            ", or kv_block_size=" + std::to_string(engine_bs) + " in the record (--worker URL," +
            "kv_block_size=" + std::to_string(engine_bs) + ",...)"));
  } else {
    out.push_back(Result(r, "block-size", Verdict::kOk,
                         std::to_string(engine_bs) + " tokens per block, as the router hashes"));
  }

  if (!options.probe) {
    out.push_back(Result(r, "hash-stability", Verdict::kSkip,
                         "no probe sent (start-up checks are passive; `infera-router doctor "
                         "--fingerprints FILE` before and after an engine restart checks it)"));
  } else if (options.fingerprints_path.empty()) {
    out.push_back(Result(r, "hash-stability", Verdict::kSkip,
                         "no --fingerprints FILE: run the doctor with one before and after an "
                         "engine restart to compare the engine's hashes of the same tokens"));
  } else if (!w.sighting.fingerprint || !w.probe_seq) {
    out.push_back(Result(r, "hash-stability", Verdict::kSkip,
                         engine_bs == 0 ? "no probe event to read"
                                        : "the block size does not divide the probe's fixed "
                                          "part: no fingerprint"));
  } else {
    LoadFingerprints();
    Fingerprint now{engine_bs, *w.sighting.fingerprint, *w.probe_seq, NowIso8601()};
    auto it = recorded.find(r.worker_id);
    std::optional<Fingerprint> before;
    if (it != recorded.end()) before = it->second;
    CheckResult c = CompareFingerprint(r.worker_id, r.engine, before, now);
    if (!fingerprints_error.empty()) c.detail += " (" + fingerprints_error + ")";
    out.push_back(std::move(c));
    seen[r.worker_id] = now;
  }
}

void FleetDoctor::Impl::CheckRenderParity(const WorkerRecord& r, std::vector<CheckResult>& out) {
  if (!options.render_parity) return;
  if (!router_checked || !rendering) {
    out.push_back(Result(r, "render-parity", Verdict::kSkip,
                         "the router renders no chats (see router-tokenizer)"));
    return;
  }
  const router::ProbeShape shape = router::ProbeShapeFor(r.engine);
  auto answer = Fetch(r.url, "POST", "/tokenize",
                      router::ProbeRequestBody(shape, r.model_name, rendering->text));
  std::string detail;
  const router::ProbeOutcome outcome =
      answer.ok()
          ? router::ClassifyProbeAnswer(answer->status, answer->body, rendering->ids, &detail)
          : router::ProbeOutcome::kError;
  if (!answer.ok()) detail = answer.status().ToString();
  const std::string what = shape == router::ProbeShape::kSglangPrompt
                               ? "its tokenizer (SGLang shape: the router's rendering)"
                               : "its chat template and tokenizer (vLLM shape)";
  switch (outcome) {
    case router::ProbeOutcome::kExact:
      out.push_back(Result(r, "render-parity", Verdict::kOk,
                           "the probe chat gives the router's " +
                               std::to_string(rendering->ids.size()) + " ids through " + what));
      break;
    case router::ProbeOutcome::kDiverged:
      out.push_back(Result(
          r, "render-parity", Verdict::kFail, "the probe chat through " + what + ": " + detail,
          "the engine turns a chat into other token ids than the router (one token is "
          "enough): every block from the first difference on hashes differently, so chats "
          "miss on this worker although it holds their prefix",
          "serve the router's chat template and tokenizer on the engine (vLLM: the model's "
          "own files, no --chat-template override, or the same file on both sides; "
          "infera-mock-engine: --tokenizer DIR, the router's directory) and point "
          "--router-tokenizer-path at the engine's model files"));
      break;
    case router::ProbeOutcome::kUnsupported:
      out.push_back(Result(r, "render-parity", Verdict::kWarn,
                           "POST /tokenize answered " + std::to_string(answer->status),
                           "render parity cannot be checked; the router counts the worker as "
                           "rendering like itself",
                           "an engine that serves /tokenize (vLLM, SGLang)"));
      break;
    case router::ProbeOutcome::kError:
      out.push_back(Result(r, "render-parity", Verdict::kWarn, "POST /tokenize: " + detail,
                           "render parity could not be checked this time", ""));
      break;
  }
}

void FleetDoctor::Impl::LoadFingerprints() {
  if (fingerprints_loaded) return;
  fingerprints_loaded = true;
  std::ifstream in(options.fingerprints_path);
  if (!in) return;  // the first run
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("workers") || !j["workers"].is_object()) {
    fingerprints_error = options.fingerprints_path + " is not a fingerprints file: rewritten";
    return;
  }
  for (const auto& [id, v] : j["workers"].items()) {
    if (!v.is_object() || !v.contains("hash") || !v["hash"].is_string()) continue;
    Fingerprint f;
    f.block_size = v.value("block_size", 0u);
    f.hash = std::strtoull(v["hash"].get<std::string>().c_str(), nullptr, 16);
    f.seq = v.value("seq", uint64_t{0});
    f.recorded_at = v.value("recorded_at", std::string());
    recorded[id] = f;
  }
}

absl::Status FleetDoctor::SaveFingerprints() {
  Impl& m = *impl_;
  if (m.options.fingerprints_path.empty() || m.seen.empty()) return absl::OkStatus();
  m.LoadFingerprints();
  for (const auto& [id, f] : m.seen) m.recorded[id] = f;
  nlohmann::json workers = nlohmann::json::object();
  for (const auto& [id, f] : m.recorded) {
    char hash[24];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(f.hash));
    workers[id] = {{"block_size", f.block_size},
                   {"hash", hash},
                   {"seq", f.seq},
                   {"recorded_at", f.recorded_at}};
  }
  const std::string tmp = m.options.fingerprints_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"version", 1}, {"workers", workers}}.dump(2) << "\n";
    if (!out) return absl::UnavailableError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), m.options.fingerprints_path.c_str()) != 0) {
    return absl::UnavailableError("cannot replace " + m.options.fingerprints_path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkerRecord>> CollectWorkers(const discovery::DiscoveryConfig& config,
                                                         int64_t wait_ms, int64_t quiet_ms) {
  absl::StatusOr<std::unique_ptr<discovery::Discovery>> created =
      discovery::CreateDiscovery(config);
  if (!created.ok()) return created.status();
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, WorkerRecord> records;
  auto last_change = Clock::now();
  discovery::DiscoveryCallbacks callbacks;
  callbacks.on_added = [&](const WorkerRecord& r) {
    std::lock_guard<std::mutex> lock(mu);
    records[r.worker_id] = r;
    last_change = Clock::now();
    cv.notify_all();
  };
  callbacks.on_updated = callbacks.on_added;
  callbacks.on_removed = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    records.erase(id);
    last_change = Clock::now();
    cv.notify_all();
  };
  if (absl::Status s = (*created)->Start(callbacks); !s.ok()) return s;
  const bool is_static =
      config.backend == "static" ||
      (config.backend.empty() && (!config.worker_flags.empty() || !config.workers_file.empty()));
  if (!is_static) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
    std::unique_lock<std::mutex> lock(mu);
    while (Clock::now() < deadline) {
      if (!records.empty() && Clock::now() - last_change >= std::chrono::milliseconds(quiet_ms)) {
        break;
      }
      cv.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  (*created)->Stop();
  std::vector<WorkerRecord> out;
  for (auto& [id, r] : records) out.push_back(std::move(r));
  return out;
}

}  // namespace infera::doctor
