#include "router/dispatch/fake_upstream.h"

#include <limits>
#include <optional>
#include <stdexcept>

namespace infera::router {
namespace {

class FakeResponse final : public UpstreamResponse {
 public:
  FakeResponse(FakeUpstream& owner, Script script, std::shared_ptr<http::Cancellation> request,
               int64_t deadline_ns)
      : owner_(owner),
        script_(std::move(script)),
        request_cancel_(std::move(request)),
        deadline_ns_(deadline_ns) {
    headers_.Add("Content-Type", script_.content_type);
  }

  int status() const override { return script_.status; }
  const http::Headers& headers() const override { return headers_; }

  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override {
    if (cancelled_) co_return absl::CancelledError("cancelled");
    if (next_ < script_.pieces.size())
      co_return std::optional<std::string>(script_.pieces[next_++]);
    if (script_.throw_after_pieces) throw std::runtime_error("scripted exception in Read");
    if (script_.hold && !held_) {
      held_ = true;
      // Either cancellation wakes the hold: the client's (request) or Cancel() here.
      auto mine = std::make_shared<http::Cancellation>();
      own_cancel_ = mine;
      absl::Status woke = co_await owner_.Hold(request_cancel_, deadline_ns_, mine);
      own_cancel_.reset();
      if (!woke.ok()) co_return woke;
    }
    if (!script_.read_error.ok()) co_return script_.read_error;
    co_return std::optional<std::string>();
  }

  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes) override {
    std::string all;
    while (true) {
      auto piece = co_await Read();
      if (!piece.ok()) co_return piece.status();
      if (!piece->has_value()) co_return all;
      all += **piece;
      if (all.size() > max_bytes) co_return absl::ResourceExhaustedError("body too large");
    }
  }

  void Cancel() override {
    if (cancelled_) return;
    cancelled_ = true;
    owner_.CountCancelled();
    if (own_cancel_) own_cancel_->Cancel();
  }

 private:
  FakeUpstream& owner_;
  Script script_;
  std::shared_ptr<http::Cancellation> request_cancel_;
  std::shared_ptr<http::Cancellation> own_cancel_;
  int64_t deadline_ns_;
  http::Headers headers_;
  size_t next_ = 0;
  bool held_ = false;
  bool cancelled_ = false;
};

}  // namespace

void FakeUpstream::Push(const std::string& host_port, Script script) {
  absl::MutexLock lock(&mu_);
  scripts_[host_port].push_back(std::move(script));
}

void FakeUpstream::PushHealth(const std::string& host_port, Script script) {
  absl::MutexLock lock(&mu_);
  health_scripts_[host_port].push_back(std::move(script));
}

int FakeUpstream::health_probes(const std::string& host_port) const {
  absl::MutexLock lock(&mu_);
  auto it = health_probes_.find(host_port);
  return it == health_probes_.end() ? 0 : it->second;
}

void FakeUpstream::Release() { Wake(/*release=*/true, /*expire=*/false); }
void FakeUpstream::Expire() { Wake(/*release=*/false, /*expire=*/true); }

void FakeUpstream::Wake(bool release, bool expire) {
  absl::MutexLock lock(&mu_);
  const int64_t now_ns = clock_.NowNs();
  for (const auto& w : waiters_) {
    bool wake = false;
    if (release) wake = w->released = true;
    if (expire && now_ns >= w->deadline_ns) wake = w->expired = true;
    if (wake) asio::post(w->executor, [timer = w->timer] { timer->cancel(); });
  }
}

std::vector<SentRequest> FakeUpstream::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

int FakeUpstream::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

int FakeUpstream::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

void FakeUpstream::CountCancelled() {
  absl::MutexLock lock(&mu_);
  ++cancelled_;
}

http::Awaitable<absl::Status> FakeUpstream::Hold(std::shared_ptr<http::Cancellation> request,
                                                 int64_t deadline_ns,
                                                 std::shared_ptr<http::Cancellation> own) {
  auto w = std::make_shared<Waiter>();
  w->executor = co_await asio::this_coro::executor;
  w->timer = std::make_shared<asio::steady_timer>(w->executor);
  w->timer->expires_at(asio::steady_timer::time_point::max());
  w->deadline_ns = deadline_ns;
  auto on_cancel = [this, w] {
    {
      absl::MutexLock lock(&mu_);
      w->cancelled = true;
    }
    w->timer->cancel();
  };
  if (request && request->cancelled()) co_return absl::CancelledError("cancelled");
  if (request) request->Bind(on_cancel);
  if (own) own->Bind(on_cancel);
  {
    absl::MutexLock lock(&mu_);
    waiters_.push_back(w);
  }
  boost::system::error_code ec;
  co_await w->timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (request) request->Unbind();
  if (own) own->Unbind();
  absl::MutexLock lock(&mu_);
  std::erase(waiters_, w);
  if (w->cancelled) {
    ++cancelled_;
    co_return absl::CancelledError("cancelled");
  }
  if (w->expired) co_return absl::DeadlineExceededError("deadline exceeded");
  co_return absl::OkStatus();
}

http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> FakeUpstream::Send(
    UpstreamRequest request) {
  Script script;
  {
    absl::MutexLock lock(&mu_);
    const std::string host_port =
        request.endpoint.host + ":" + std::to_string(request.endpoint.port);
    const bool health = request.method == "GET" && request.path == "/health";
    if (health) {
      ++health_probes_[host_port];
      script.pieces = {R"({"status":"ok"})"};
    } else {
      sent_.push_back(
          {host_port, request.path, request.headers, request.body, request.deadline_ns});
    }
    std::deque<Script>& queue = health ? health_scripts_[host_port] : scripts_[host_port];
    if (!queue.empty()) {
      script = queue.front();
      if (queue.size() > 1) queue.pop_front();
    }
  }
  if (script.hold_before_head) {
    absl::Status woke = co_await Hold(request.cancel, request.deadline_ns, nullptr);
    if (!woke.ok()) co_return woke;
  }
  if (script.throw_in_send) throw std::runtime_error("scripted exception in Send");
  if (!script.send_error.ok()) co_return script.send_error;
  co_return std::unique_ptr<UpstreamResponse>(std::make_unique<FakeResponse>(
      *this, std::move(script), request.cancel, request.deadline_ns));
}

}  // namespace infera::router
