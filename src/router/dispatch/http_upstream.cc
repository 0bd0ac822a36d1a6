#include "router/dispatch/http_upstream.h"

#include <algorithm>
#include <chrono>

namespace infera::router {
namespace {

class HttpResponse final : public UpstreamResponse {
 public:
  explicit HttpResponse(std::unique_ptr<http::ClientStream> stream) : stream_(std::move(stream)) {}
  int status() const override { return stream_->status(); }
  const http::Headers& headers() const override { return stream_->headers(); }
  http::Awaitable<absl::StatusOr<std::optional<std::string>>> Read() override {
    return stream_->Read();
  }
  http::Awaitable<absl::StatusOr<std::string>> ReadAll(uint64_t max_bytes) override {
    return stream_->ReadAll(max_bytes);
  }
  void Cancel() override { stream_->Cancel(); }

 private:
  std::unique_ptr<http::ClientStream> stream_;
};

}  // namespace

HttpUpstream::HttpUpstream(http::IoPool& pool, const core::Clock& clock) : clock_(clock) {
  for (int i = 0; i < pool.size(); ++i) {
    clients_.push_back(std::make_unique<http::Client>(pool.executor(i)));
  }
}

http::Awaitable<absl::StatusOr<std::unique_ptr<UpstreamResponse>>> HttpUpstream::Send(
    UpstreamRequest request) {
  http::Client& client = *clients_[static_cast<size_t>(std::max(0, http::IoPool::CurrentIndex()))];
  const http::Deadline deadline = std::chrono::steady_clock::now() +
                                  std::chrono::nanoseconds(request.deadline_ns - clock_.NowNs());
  auto sent = co_await client.Send(std::move(request.endpoint), std::move(request.method),
                                   std::move(request.path), std::move(request.headers),
                                   std::move(request.body), deadline, std::move(request.cancel));
  if (!sent.ok()) co_return sent.status();
  co_return std::unique_ptr<UpstreamResponse>(std::make_unique<HttpResponse>(std::move(*sent)));
}

}  // namespace infera::router
