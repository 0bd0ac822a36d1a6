#include "router/dispatch/pd/pd_dispatcher.h"

#include <chrono>
#include <utility>

#include "core/pd_planner.h"
#include "http/client.h"
#include "router/request/api_errors.h"
#include "router/dispatch/attempt_watch.h"
#include "router/dispatch/leg_request.h"
#include "router/dispatch/pd/protocol.h"
#include "router/dispatch/relay.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

namespace asio = http::asio;
using nlohmann::json;

constexpr uint64_t kMaxPrefillAnswerBytes = uint64_t{16} << 20;

// SplitMix64's finaliser.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// An answer already read whole (a prefill leg's 4xx), for Relay.
class BufferedResponse final : public UpstreamResponse {
 public:
  BufferedResponse(int status, http::Headers headers, std::string body)
      : status_(status), headers_(std::move(headers)), body_(std::move(body)) {}
  int status() const override { return status_; }
  const http::Headers& headers() const override { return headers_; }
  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override {
    if (read_) co_return std::optional<std::string>();
    read_ = true;
    co_return std::optional<std::string>(std::move(body_));
  }
  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t) override {
    read_ = true;
    co_return std::move(body_);
  }
  void Cancel() override {}

 private:
  int status_;
  http::Headers headers_;
  std::string body_;
  bool read_ = false;
};

// Wakes one waiter when a concurrently running leg has ended (same loop).
class LegJoin {
 public:
  explicit LegJoin(const asio::any_io_executor& executor) : timer_(executor) {
    timer_.expires_at(asio::steady_timer::time_point::max());
  }
  void Signal() {
    done_ = true;
    timer_.cancel();
  }
  http::Awaitable<void> Wait() {
    while (!done_) {
      boost::system::error_code ec;
      co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

 private:
  asio::steady_timer timer_;
  bool done_ = false;
};

// The request's body as the leg's worker gets it (data_parallel_rank set), as JSON.
json LegBody(const RequestContext& ctx, const PickLeg& leg) {
  return json::parse(LegRequest(ctx, leg).body, nullptr, false);
}

}  // namespace

absl::StatusOr<PdGuardRelease> ParsePdGuardRelease(std::string_view name) {
  if (name == "completion") return PdGuardRelease::kCompletion;
  if (name == "prefill") return PdGuardRelease::kPrefill;
  return absl::InvalidArgumentError(
      "--pd-prefill-guard-release must be prefill or completion, not '" + std::string(name) + "'");
}

const PdProtocol& PdProtocolFor(PlanProtocol protocol) {
  switch (protocol) {
    case PlanProtocol::kVllmNixl:
      return VllmNixlProtocol();
    case PlanProtocol::kVllmMooncake:
      return VllmMooncakeProtocol();
    case PlanProtocol::kSglangBootstrap:
    case PlanProtocol::kMixed:
      break;
  }
  return SglangBootstrapProtocol();
}

struct PdDispatcher::PrefillResult {
  enum Kind : uint8_t {
    kOk,
    kFailed,
    kClientError,
    kCancelled,
    kTimeout,
    kLocal
  } kind = kCancelled;
  int status = 0;
  http::Headers headers;
  std::string body;
  std::string message;  // for the client: names no worker or address
  std::string detail;   // for the log: the worker and what failed (empty: `message`)
};

PdDispatcher::PdDispatcher(int max_attempts, int64_t request_timeout_ms, PdOptions options,
                           const WorkerSet& workers, PickPlanner& planner, Upstream& upstream,
                           Dispatcher& mixed, const core::Clock& clock, RouterMetrics& metrics,
                           uint64_t seed, int64_t first_byte_timeout_ms)
    : max_attempts_(max_attempts),
      options_(options),
      workers_(workers),
      planner_(planner),
      upstream_(upstream),
      mixed_(mixed),
      clock_(clock),
      metrics_(metrics),
      failures_(request_timeout_ms, clock, metrics),
      seed_(seed),
      first_byte_timeout_ms_(first_byte_timeout_ms) {}

uint64_t PdDispatcher::NextRandom() {
  return Mix64(seed_ ^ Mix64(counter_.fetch_add(1, std::memory_order_relaxed)));
}

bool PdDispatcher::ServesPd(const RequestContext& ctx) const {
  const std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
  for (const auto& wk : *fleet) {
    if (wk->record.disagg_mode == discovery::DisaggMode::kMixed) continue;
    if (wk->record.model_name.empty() || wk->record.model_name == ctx.api.model) return true;
  }
  return false;
}

http::Awaitable<void> PdDispatcher::Dispatch(RequestContext& ctx, http::ResponseWriter& w) {
  if (ServesPd(ctx)) {
    co_await DispatchPd(ctx, w);
  } else {
    co_await mixed_.Dispatch(ctx, w);
  }
}

http::Awaitable<void> PdDispatcher::DispatchPd(RequestContext& ctx, http::ResponseWriter& w) {
  PlanHistory history;
  Failure failure;
  core::Role failed_role = core::Role::kPrefill;  // the leg whose worker failed last
  for (int attempt = 0; attempt < max_attempts_; ++attempt) {
    std::shared_ptr<const Fleet> fleet = workers_.Snapshot();
    auto plan = planner_.PlanPd(ctx, *fleet, history);
    if (!plan.ok()) {
      const absl::StatusCode code = plan.status().code();
      // After a failed leg, its worker is excluded: report that failure instead.
      if (code == absl::StatusCode::kNotFound || !history.tried.empty()) break;
      const int status = code == absl::StatusCode::kUnimplemented ? 501 : 503;
      ctx.End(Outcome::kNoWorker, status);
      std::string message(plan.status().message());
      co_await SendError(w, ctx.kind, status, std::move(message), ctx.request_id);
      co_return;
    }
    if (attempt > 0) {
      // Counted on the worker that takes the failed one's place (its role's leg).
      const PickLeg& next = plan->legs.size() > 1 && failed_role == core::Role::kDecode
                                ? plan->legs[1]
                                : plan->legs[0];
      metrics_.CountFailover(next.worker->record.worker_id);
    }
    LegEnd end = LegEnd::kFailed;
    if (plan->legs.size() == 1) {
      const PickLeg& leg = plan->legs[0];
      metrics_.pd().CountPlan(core::PdPlanKindName(leg.role == core::Role::kDecode
                                                       ? core::PdPlanKind::kDecodeOnly
                                                       : core::PdPlanKind::kMixed));
      end = co_await SendAndRelay(ctx, w, leg, nullptr, ctx.cancel, 1, nullptr, failure);
      if (end == LegEnd::kFailed) history.tried.push_back(leg.worker->record.worker_id);
    } else {
      metrics_.pd().CountPlan(core::PdPlanKindName(core::PdPlanKind::kDisaggregated));
      end = co_await RunPair(ctx, w, *plan, attempt, history, failure);
      if (end == LegEnd::kFailed) {
        failed_role = history.tried.back() == plan->legs[1].worker->record.worker_id
                          ? core::Role::kDecode
                          : core::Role::kPrefill;
      }
    }
    if (end == LegEnd::kCancelled) {
      ctx.End(Outcome::kCancelled, 499);
      co_return;
    }
    if (end == LegEnd::kAnswered) co_return;
  }

  // Nothing reached the client.
  const char* code = nullptr;
  if (!history.any_worker) {
    failure = {503, "no workers available"};
  } else if (!history.model_known) {
    failure = {404, "the model '" + ctx.api.model + "' does not exist"};
    code = "model_not_found";
  } else if (history.plans == 0) {
    failure = {503, "no worker available for model '" + ctx.api.model +
                        "' (all circuit breakers open or health checks failing)"};
  }
  ctx.End(failure.status == 404   ? Outcome::kClientError
          : failure.status == 502 ? Outcome::kUpstreamError
                                  : Outcome::kNoWorker,
          failure.status);
  co_await SendError(w, ctx.kind, failure.status, failure.message, ctx.request_id, code);
}

http::Awaitable<PdDispatcher::LegEnd> PdDispatcher::RunPair(RequestContext& ctx,
                                                            http::ResponseWriter& w, PickPlan& plan,
                                                            int attempt, PlanHistory& history,
                                                            Failure& failure) {
  const PdProtocol& protocol = PdProtocolFor(plan.protocol);
  const PickLeg& pre = plan.legs[0];
  const PickLeg& dec = plan.legs[1];
  // A failover's pair gets its own transfer key (Mooncake's transfer id): the failed
  // pair's prefill may still hold KV under the first one.
  const std::string transfer_key =
      attempt == 0 ? ctx.request_id : ctx.request_id + "-" + std::to_string(attempt);
  const PdLegInput in{pre, dec, transfer_key, NextRandom()};
  auto abandon_both = [&] {
    pre.worker->health.OnAbandoned();
    dec.worker->health.OnAbandoned();
  };
  json pre_json = LegBody(ctx, pre);
  json dec_json = LegBody(ctx, dec);
  if (!pre_json.is_object() || !dec_json.is_object()) {
    abandon_both();
    ctx.End(Outcome::kClientError, 400);
    co_await SendError(w, ctx.kind, 400, "the request body must be a JSON object", ctx.request_id);
    co_return LegEnd::kAnswered;
  }
  std::string pre_body = protocol.PrefillBody(std::move(pre_json), in).dump();
  if (ctx.cancel->cancelled()) {
    abandon_both();
    co_return LegEnd::kCancelled;
  }
  // The client's disconnect cancels both legs.
  auto pre_cancel = std::make_shared<http::Cancellation>();
  auto dec_cancel = std::make_shared<http::Cancellation>();
  ctx.cancel->Bind([pre_cancel, dec_cancel] {
    pre_cancel->Cancel();
    dec_cancel->Cancel();
  });
  struct Unbind {
    http::Cancellation& c;
    ~Unbind() { c.Unbind(); }
  } unbind{*ctx.cancel};
  auto client_gone = [&] { return ctx.cancel->cancelled() || w.client_gone(); };

  PrefillResult prefill;
  bool relaying = false;
  LegEnd end = LegEnd::kFailed;
  if (!protocol.concurrent()) {
    co_await RunPrefill(ctx, pre, std::move(pre_body), pre_cancel, prefill);
    plan.prefill_guards.Release();  // serial: the prefill is done
    if (prefill.kind != PrefillResult::kOk) {
      dec.worker->health.OnAbandoned();
      if (prefill.kind == PrefillResult::kCancelled) co_return LegEnd::kCancelled;
      co_return co_await PrefillFailed(ctx, w, pre, prefill, history, failure);
    }
    const json answer = json::parse(prefill.body, nullptr, false);
    auto dec_body = protocol.DecodeBody(std::move(dec_json), in, &answer);
    if (!dec_body.ok()) {
      dec.worker->health.OnAbandoned();
      metrics_.pd().CountBootstrapFailure("missing_kv_transfer_params");
      prefill.kind = PrefillResult::kFailed;
      prefill.message = "the prefill worker answered without what the decode leg needs: " +
                        std::string(dec_body.status().message());
      co_return co_await PrefillFailed(ctx, w, pre, prefill, history, failure);
    }
    const std::string body = dec_body->dump();
    end = co_await SendAndRelay(ctx, w, dec, &body, dec_cancel, options_.decode_attempts, &relaying,
                                failure);
  } else {
    auto dec_body = protocol.DecodeBody(std::move(dec_json), in, nullptr);
    if (!dec_body.ok()) {  // a concurrent protocol needs nothing from the prefill
      abandon_both();
      failure = {502, std::string(dec_body.status().message())};
      co_return LegEnd::kFailed;
    }
    const std::string body = dec_body->dump();
    LegJoin join(co_await asio::this_coro::executor);
    const bool release_early = options_.prefill_guard_release == PdGuardRelease::kPrefill;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [](PdDispatcher* self, RequestContext* c, const PickLeg* leg, std::string b,
           std::shared_ptr<http::Cancellation> cancel, PrefillResult* out, PickPlan* p, bool early,
           const bool* relaying, http::Cancellation* decode_cancel,
           LegJoin* done) -> http::Awaitable<void> {
          co_await self->RunPrefill(*c, *leg, std::move(b), std::move(cancel), *out);
          // A failed prefill leaves the decode leg nothing to fetch.
          if (out->kind != PrefillResult::kOk && !*relaying) decode_cancel->Cancel();
          if (early) p->prefill_guards.Release();
          done->Signal();
        }(this, &ctx, &pre, std::move(pre_body), pre_cancel, &prefill, &plan, release_early,
                          &relaying, dec_cancel.get(), &join),
        asio::detached);
    end = co_await SendAndRelay(ctx, w, dec, &body, dec_cancel, options_.decode_attempts, &relaying,
                                failure);
    // The prefill is of no more use when the client is gone or the answer failed.
    if (end != LegEnd::kAnswered || ctx.outcome != Outcome::kSuccess) pre_cancel->Cancel();
    co_await join.Wait();
  }
  const bool prefill_failed =
      prefill.kind != PrefillResult::kOk && prefill.kind != PrefillResult::kCancelled;
  if (end == LegEnd::kCancelled && client_gone()) co_return LegEnd::kCancelled;
  if (end != LegEnd::kAnswered && prefill_failed) {
    // The decode leg failed or was cancelled because its prefill did.
    co_return co_await PrefillFailed(ctx, w, pre, prefill, history, failure);
  }
  if (end == LegEnd::kCancelled) co_return LegEnd::kCancelled;
  if (end == LegEnd::kFailed) {
    // The decode worker failed before its first byte: its KV hand-off is lost with it,
    // so the next attempt plans a new pair without it (both legs sent again).
    history.tried.push_back(dec.worker->record.worker_id);
  }
  co_return end;
}

http::Awaitable<void> PdDispatcher::RunPrefill(RequestContext& ctx, const PickLeg& leg,
                                               std::string body,
                                               std::shared_ptr<http::Cancellation> cancel,
                                               PrefillResult& out) {
  const FleetWorker& worker = *leg.worker;
  const std::string& worker_id = worker.record.worker_id;
  UpstreamRequest up = LegRequest(ctx, leg);
  up.body = std::move(body);
  // The prefill's head comes with its whole answer: only the health checks cut it.
  AttemptWatch watch(co_await asio::this_coro::executor, worker, cancel, 0);
  up.cancel = watch.cancel();
  const int64_t start_ns = clock_.NowNs();
  auto sent = co_await upstream_.Send(std::move(up));
  if (const AttemptWatch::Fired fired = watch.Disarm();
      fired != AttemptWatch::Fired::kNone && !cancel->cancelled()) {
    if (sent.ok()) (*sent)->Cancel();
    out.message =
        failures_.JudgeWatch(worker, fired, first_byte_timeout_ms_, "prefill worker").message;
    metrics_.pd().CountBootstrapFailure("prefill_unreachable");
    out.kind = PrefillResult::kFailed;
    co_return;
  }
  absl::Status error;
  if (sent.ok()) {
    out.status = (*sent)->status();
    out.headers = (*sent)->headers();
    auto body_or = co_await (*sent)->ReadAll(kMaxPrefillAnswerBytes);
    if (body_or.ok()) {
      out.body = std::move(*body_or);
    } else {
      error = body_or.status();
    }
  } else {
    error = sent.status();
  }
  if (!error.ok()) {
    SendFailures::Judged failed =
        failures_.Judge(worker, error, cancel->cancelled(), ctx.request_id, "prefill worker");
    out.message = std::move(failed.message);
    out.detail = std::move(failed.detail);
    switch (failed.kind) {
      case SendFailures::Kind::kCancelled:
        out.kind = PrefillResult::kCancelled;
        break;
      case SendFailures::Kind::kLocal:
        out.kind = PrefillResult::kLocal;
        break;
      case SendFailures::Kind::kTimeout:
        metrics_.pd().CountBootstrapFailure("prefill_timeout");
        out.kind = PrefillResult::kTimeout;
        break;
      case SendFailures::Kind::kUnreachable:
        metrics_.pd().CountBootstrapFailure("prefill_unreachable");
        out.kind = PrefillResult::kFailed;
        break;
    }
    co_return;
  }
  if (out.status >= 500) {
    failures_.Report(worker, "status_5xx");
    metrics_.pd().CountBootstrapFailure("prefill_status");
    out.kind = PrefillResult::kFailed;
    out.message = UpstreamStatusMessage("the prefill worker", out.status, out.body);
    co_return;
  }
  worker.health.OnSuccess();
  metrics_.pd().ObserveLeg(core::Role::kPrefill, worker_id, (clock_.NowNs() - start_ns) * 1e-9);
  out.kind = out.status >= 400 ? PrefillResult::kClientError : PrefillResult::kOk;
}

http::Awaitable<PdDispatcher::LegEnd> PdDispatcher::PrefillFailed(
    RequestContext& ctx, http::ResponseWriter& w, const PickLeg& leg, PrefillResult& prefill,
    PlanHistory& history, Failure& failure) {
  const std::string& worker_id = leg.worker->record.worker_id;
  switch (prefill.kind) {
    case PrefillResult::kOk:
    case PrefillResult::kFailed:
      if (prefill.detail.empty()) {
        spdlog::warn("request {}: prefill worker {}: {}", ctx.request_id, worker_id,
                     prefill.message);
      } else {
        spdlog::warn("request {}: {}", ctx.request_id, prefill.detail);
      }
      history.tried.push_back(worker_id);
      failure = {502, std::move(prefill.message)};
      co_return LegEnd::kFailed;
    case PrefillResult::kClientError: {
      BufferedResponse answer(prefill.status, std::move(prefill.headers), std::move(prefill.body));
      co_await Relay::Run(ctx, answer, worker_id, ctx.transform.get(), w);
      co_return LegEnd::kAnswered;
    }
    case PrefillResult::kTimeout:
      ctx.End(Outcome::kTimeout, 504);
      co_await SendError(w, ctx.kind, 504, std::move(prefill.message), ctx.request_id);
      co_return LegEnd::kAnswered;
    case PrefillResult::kLocal:
      ctx.End(Outcome::kRouterError, 503);
      co_await SendError(w, ctx.kind, 503, std::move(prefill.message), ctx.request_id);
      co_return LegEnd::kAnswered;
    case PrefillResult::kCancelled:
      break;
  }
  co_return LegEnd::kCancelled;
}

http::Awaitable<PdDispatcher::LegEnd> PdDispatcher::SendAndRelay(
    RequestContext& ctx, http::ResponseWriter& w, const PickLeg& leg, const std::string* body,
    std::shared_ptr<http::Cancellation> cancel, int tries, bool* relaying, Failure& failure) {
  const FleetWorker& worker = *leg.worker;
  const std::string& worker_id = worker.record.worker_id;
  const bool pd_leg = body != nullptr;  // the decode leg of a disaggregated plan
  int64_t backoff_ms = options_.decode_backoff_ms;
  for (int t = 0; t < tries; ++t) {
    if (t > 0) {
      asio::steady_timer timer(co_await asio::this_coro::executor,
                               std::chrono::milliseconds(backoff_ms));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      backoff_ms *= 2;
    }
    if (cancel->cancelled() || w.client_gone()) {  // or the prefill leg failed already
      worker.health.OnAbandoned();
      co_return LegEnd::kCancelled;
    }
    UpstreamRequest up = LegRequest(ctx, leg);
    if (pd_leg) up.body = *body;
    // Lives until the answer is relayed: the client's disconnect reaches the leg
    // through it.
    AttemptWatch watch(co_await asio::this_coro::executor, worker, cancel,
                       ctx.api.stream ? first_byte_timeout_ms_ : 0);
    up.cancel = watch.cancel();
    const int64_t start_ns = clock_.NowNs();
    auto sent = co_await upstream_.Send(std::move(up));
    if (const AttemptWatch::Fired fired = watch.Disarm();
        fired != AttemptWatch::Fired::kNone && !cancel->cancelled() && !w.client_gone()) {
      if (sent.ok()) (*sent)->Cancel();
      if (pd_leg) metrics_.pd().CountBootstrapFailure("decode_unreachable");
      SendFailures::Judged failed = failures_.JudgeWatch(worker, fired, first_byte_timeout_ms_);
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      failure = {502, std::move(failed.message)};
      continue;
    }
    if (!sent.ok()) {
      SendFailures::Judged failed = failures_.Judge(
          worker, sent.status(), cancel->cancelled() || w.client_gone(), ctx.request_id);
      switch (failed.kind) {
        case SendFailures::Kind::kCancelled:
          co_return LegEnd::kCancelled;
        case SendFailures::Kind::kTimeout:
        case SendFailures::Kind::kLocal:
          co_await SendFailures::Answer(ctx, w, std::move(failed));
          co_return LegEnd::kAnswered;
        case SendFailures::Kind::kUnreachable:
          break;
      }
      if (pd_leg) metrics_.pd().CountBootstrapFailure("decode_unreachable");
      failure = {failed.http_status, std::move(failed.message)};
      spdlog::warn("request {}: {}", ctx.request_id, failed.detail);
      continue;
    }
    UpstreamResponse& response = **sent;
    if (response.status() >= 500) {
      auto body_or = co_await response.ReadAll(1 << 20);
      failures_.Report(worker, "status_5xx");
      if (pd_leg) metrics_.pd().CountBootstrapFailure("decode_status");
      failure = {502, UpstreamStatusMessage("the worker", response.status(), body_or)};
      spdlog::warn("request {}: worker {}: {}", ctx.request_id, worker_id, failure.message);
      continue;
    }
    worker.health.OnSuccess();
    if (relaying != nullptr) *relaying = true;
    co_await Relay::Run(ctx, response, worker_id, ctx.transform.get(), w);
    if (leg.role == core::Role::kDecode) {
      metrics_.pd().ObserveLeg(core::Role::kDecode, worker_id, (clock_.NowNs() - start_ns) * 1e-9);
    }
    co_return LegEnd::kAnswered;
  }
  co_return LegEnd::kFailed;
}

}  // namespace infera::router
