#include "router/dispatch/pd/pd_pair.h"

#include <utility>

#include "base/splitmix64.h"
#include "router/dispatch/leg_request.h"
#include "router/request/api_errors.h"

namespace infera::router {
namespace {

namespace asio = http::asio;
using nlohmann::json;

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

// The request's body as the leg's worker gets it (data_parallel_rank set), as JSON:
// `parsed` is the one parse of the request's upstream body both legs share.
json LegBody(json parsed, const RequestContext& ctx, const PickLeg& leg) {
  EditLegJson(parsed, ctx, leg);
  return parsed;
}

}  // namespace

// One Run's state, shared by its serial or concurrent half.
struct PdPair::Attempt {
  RequestContext& ctx;
  http::ResponseWriter& w;
  PickPlan& plan;
  const PdProtocol& protocol;
  const PdLegInput& in;
  json dec_json;
  std::shared_ptr<http::Cancellation> pre_cancel = std::make_shared<http::Cancellation>();
  std::shared_ptr<http::Cancellation> dec_cancel = std::make_shared<http::Cancellation>();
  PrefillResult prefill{};
  bool relaying = false;
  PlanHistory& history;
  LegFailure& failure;
};

PdPair::PdPair(PdOptions options, LegSender& sender, const core::Clock& clock,
               RouterMetrics& metrics, uint64_t seed)
    : options_(options), sender_(sender), clock_(clock), metrics_(metrics), seed_(seed) {}

uint64_t PdPair::NextRandom() {
  return base::SplitMix64(seed_ ^
                          base::SplitMix64(counter_.fetch_add(1, std::memory_order_relaxed)));
}

LegSendOptions PdPair::DecodeOptions(Attempt& a, const std::string* body) const {
  return {.body = body,
          .cancel = a.dec_cancel,
          .tries = options_.decode_attempts,
          .backoff_ms = options_.decode_backoff_ms,
          .decode_leg = true,
          .relaying = &a.relaying};
}

http::Awaitable<LegEnd> PdPair::Run(RequestContext& ctx, http::ResponseWriter& w, PickPlan& plan,
                                    int attempt, PlanHistory& history, LegFailure& failure) {
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
  json parsed = json::parse(ctx.upstream_body, nullptr, false);
  json pre_json = LegBody(parsed, ctx, pre);
  Attempt a{.ctx = ctx,
            .w = w,
            .plan = plan,
            .protocol = protocol,
            .in = in,
            .dec_json = LegBody(std::move(parsed), ctx, dec),
            .history = history,
            .failure = failure};
  if (!pre_json.is_object() || !a.dec_json.is_object()) {
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
  ctx.cancel->Bind([pre_cancel = a.pre_cancel, dec_cancel = a.dec_cancel] {
    pre_cancel->Cancel();
    dec_cancel->Cancel();
  });
  struct Unbind {
    http::Cancellation& c;
    ~Unbind() { c.Unbind(); }
  } unbind{*ctx.cancel};
  if (protocol.concurrent()) co_return co_await RunConcurrent(a, std::move(pre_body));
  co_return co_await RunSerial(a, std::move(pre_body));
}

http::Awaitable<LegEnd> PdPair::RunSerial(Attempt& a, std::string pre_body) {
  const PickLeg& pre = a.in.prefill;
  const PickLeg& dec = a.in.decode;
  co_await RunPrefill(a.ctx, pre, std::move(pre_body), a.pre_cancel, a.prefill);
  // Serial: the prefill is done (an answer: a sample of the worker's prefill rate).
  if (a.prefill.kind == PrefillResult::kOk) a.plan.prefill_guards.PrefillDone();
  a.plan.prefill_guards.Release();
  if (a.prefill.kind != PrefillResult::kOk) {
    dec.worker->health.OnAbandoned();
    if (a.prefill.kind == PrefillResult::kCancelled) co_return LegEnd::kCancelled;
    co_return co_await PrefillFailed(a.ctx, a.w, pre, a.prefill, a.history, a.failure);
  }
  const json answer = json::parse(a.prefill.body, nullptr, false);
  auto dec_body = a.protocol.DecodeBody(std::move(a.dec_json), a.in, &answer);
  if (!dec_body.ok()) {
    dec.worker->health.OnAbandoned();
    metrics_.pd().CountBootstrapFailure("missing_kv_transfer_params");
    a.prefill.kind = PrefillResult::kFailed;
    a.prefill.message = "the prefill worker answered without what the decode leg needs: " +
                        std::string(dec_body.status().message());
    co_return co_await PrefillFailed(a.ctx, a.w, pre, a.prefill, a.history, a.failure);
  }
  const std::string body = dec_body->dump();
  const LegSendOptions options = DecodeOptions(a, &body);  // named: see AttemptLoop::RunMixed
  const LegEnd end = co_await sender_.SendAndRelay(a.ctx, a.w, dec, options, a.failure);
  co_return co_await DecodeEnded(a, end);
}

http::Awaitable<LegEnd> PdPair::RunConcurrent(Attempt& a, std::string pre_body) {
  const PickLeg& pre = a.in.prefill;
  const PickLeg& dec = a.in.decode;
  auto dec_body = a.protocol.DecodeBody(std::move(a.dec_json), a.in, nullptr);
  if (!dec_body.ok()) {  // a concurrent protocol needs nothing from the prefill
    pre.worker->health.OnAbandoned();
    dec.worker->health.OnAbandoned();
    a.failure = {502, std::string(dec_body.status().message())};
    co_return LegEnd::kFailed;
  }
  const std::string body = dec_body->dump();
  LegJoin join(co_await asio::this_coro::executor);
  const bool early = options_.prefill_guard_release == PdGuardRelease::kPrefill;
  asio::co_spawn(
      co_await asio::this_coro::executor,
      [](PdPair* self, Attempt* at, std::string b, bool release_early,
         LegJoin* done) -> http::Awaitable<void> {
        co_await self->RunPrefill(at->ctx, at->in.prefill, std::move(b), at->pre_cancel,
                                  at->prefill);
        // A failed prefill leaves the decode leg nothing to fetch.
        if (at->prefill.kind != PrefillResult::kOk && !at->relaying) at->dec_cancel->Cancel();
        if (release_early && at->prefill.kind == PrefillResult::kOk) {
          at->plan.prefill_guards.PrefillDone();  // a sample of the prefill rate
        }
        if (release_early) at->plan.prefill_guards.Release();
        done->Signal();
      }(this, &a, std::move(pre_body), early, &join),
      asio::detached);
  const LegSendOptions options = DecodeOptions(a, &body);  // named: see AttemptLoop::RunMixed
  const LegEnd end = co_await sender_.SendAndRelay(a.ctx, a.w, dec, options, a.failure);
  // The prefill is of no more use when the client is gone or the answer failed.
  if (end != LegEnd::kAnswered || a.ctx.outcome != Outcome::kSuccess) a.pre_cancel->Cancel();
  co_await join.Wait();
  co_return co_await DecodeEnded(a, end);
}

http::Awaitable<LegEnd> PdPair::DecodeEnded(Attempt& a, LegEnd end) {
  const bool prefill_failed = a.prefill.kind != PrefillResult::kOk &&
                              a.prefill.kind != PrefillResult::kCancelled;
  if (end == LegEnd::kCancelled && (a.ctx.cancel->cancelled() || a.w.client_gone())) {
    co_return LegEnd::kCancelled;
  }
  if (end != LegEnd::kAnswered && prefill_failed) {
    // The decode leg failed or was cancelled because its prefill did.
    co_return co_await PrefillFailed(a.ctx, a.w, a.in.prefill, a.prefill, a.history, a.failure);
  }
  if (end == LegEnd::kFailed) {
    // The decode worker failed before its first byte: its KV hand-off is lost with it,
    // so the next attempt plans a new pair without it (both legs sent again).
    a.history.tried.push_back(a.in.decode.worker->record.worker_id);
  }
  co_return end;
}

}  // namespace infera::router
