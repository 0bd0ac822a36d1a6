// fake_worker: a small OpenAI-compatible worker for the router's integration tests
// and benchmarks, built on src/http (a real HTTP server, not a mock object).
//
//   POST /v1/chat/completions, /v1/completions  -> "tok0 tok1 ..." (--chunks pieces),
//        streamed as SSE when "stream": true (usage chunk with stream_options),
//        --chunk-delay-ms between chunks; --fail-status S answers S instead.
//   GET  /stats  -> {"requests":N,"completed":N,"cancelled":N} (cancelled = the
//        client went away mid-stream, i.e. the router cancelled the upstream).
//   --kv-events-port P: publishes BlockStored for each integer-array prompt's full
//        blocks over ZMQ (src/engine_events/publisher.h, vLLM wire shape) on tcp://127.0.0.1:P.
// Prints "fake-worker listening on <port>" once ready.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine_events/publisher.h"
#include "http/server.h"

namespace {

using infera::http::Awaitable;
using infera::http::Headers;
using infera::http::Request;
using infera::http::ResponseWriter;
using nlohmann::json;
namespace asio = infera::http::asio;

struct Config {
  int chunks = 3;
  int chunk_delay_ms = 0;
  int fail_status = 0;
  std::string name = "fake";
  uint32_t block_size = 16;
};

Config config;
std::atomic<uint64_t> requests{0}, completed{0}, cancelled{0};
std::unique_ptr<infera::events::EventPublisher> publisher;
std::mutex publish_mu;
uint64_t next_engine_hash = 1000;

void PublishBlocks(const json& prompt) {
  if (!publisher || !prompt.is_array()) return;
  std::vector<uint32_t> ids;
  for (const auto& t : prompt) {
    if (!t.is_number_integer()) return;
    ids.push_back(t.get<uint32_t>());
  }
  size_t full = ids.size() / config.block_size;
  if (full == 0) return;
  ids.resize(full * config.block_size);
  std::lock_guard<std::mutex> lock(publish_mu);
  infera::events::Stored stored;
  for (size_t i = 0; i < full; ++i) stored.engine_hashes.push_back(next_engine_hash++);
  stored.token_ids = ids;
  stored.block_size = config.block_size;
  infera::events::EventBatch batch;
  batch.events.push_back(stored);
  publisher->Publish(batch);
}

// JSON is built outside the coroutine: g++ 12 miscompiles braced initializer
// lists of string literals inside coroutine bodies.
std::string StatsJson() {
  return json({{"requests", requests.load()},
               {"completed", completed.load()},
               {"cancelled", cancelled.load()}})
      .dump();
}

std::string ErrorJson(const std::string& message) {
  return json({{"error", {{"message", message}}}}).dump();
}

json Usage() {
  return {{"prompt_tokens", 7},
          {"completion_tokens", config.chunks},
          {"total_tokens", 7 + config.chunks}};
}

std::string FullResponse(bool chat, const std::string& model) {
  std::string text;
  for (int i = 0; i < config.chunks; ++i) text += "tok" + std::to_string(i) + " ";
  json choice = chat ? json{{"index", 0},
                            {"message", {{"role", "assistant"}, {"content", text}}},
                            {"finish_reason", "stop"}}
                     : json{{"index", 0}, {"text", text}, {"finish_reason", "stop"}};
  json res = {{"id", "cmpl-" + config.name},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", 1},
              {"model", model},
              {"choices", json::array({choice})},
              {"usage", Usage()},
              {"worker", config.name}};
  return res.dump();
}

// Chunk i of a stream; i == config.chunks is the finishing chunk.
std::string StreamChunk(bool chat, const std::string& model, int i) {
  bool last = i == config.chunks;
  std::string piece = last ? "" : "tok" + std::to_string(i) + " ";
  json choice =
      chat ? json{{"index", 0},
                  {"delta", last ? json::object() : json{{"content", piece}}},
                  {"finish_reason", last ? json("stop") : json()}}
           : json{{"index", 0}, {"text", piece}, {"finish_reason", last ? json("stop") : json()}};
  json c = {{"id", "cmpl-" + config.name},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", 1},
            {"model", model},
            {"choices", json::array({choice})}};
  return "data: " + c.dump() + "\n\n";
}

std::string UsageChunk(bool chat, const std::string& model) {
  json u = {{"id", "cmpl-" + config.name},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", 1},
            {"model", model},
            {"choices", json::array()},
            {"usage", Usage()}};
  return "data: " + u.dump() + "\n\n";
}

bool WantsUsage(const json& body) {
  return body.contains("stream_options") && body["stream_options"].is_object() &&
         body["stream_options"].value("include_usage", false);
}

Headers JsonHeaders() {
  Headers h;
  h.Add("Content-Type", "application/json");
  return h;
}

Headers SseHeaders() {
  Headers h;
  h.Add("Content-Type", "text/event-stream");
  return h;
}

Awaitable<void> Handle(Request& req, ResponseWriter& w) {
  if (req.path() == "/stats") {
    co_await w.Send(200, JsonHeaders(), StatsJson());
    co_return;
  }
  const bool chat = req.path() == "/v1/chat/completions";
  if (req.method != "POST" || (!chat && req.path() != "/v1/completions")) {
    co_await w.Send(404, JsonHeaders(), ErrorJson("not found"));
    co_return;
  }
  requests.fetch_add(1);
  json body = json::parse(req.body, nullptr, false);
  if (config.fail_status != 0) {
    co_await w.Send(config.fail_status, JsonHeaders(), ErrorJson("fake failure " + config.name));
    co_return;
  }
  if (!body.is_object()) {
    co_await w.Send(400, JsonHeaders(), ErrorJson("bad json"));
    co_return;
  }
  if (!chat && body.contains("prompt")) PublishBlocks(body["prompt"]);
  const std::string model = body.contains("model") && body["model"].is_string()
                                ? body["model"].get<std::string>()
                                : std::string("m");
  const bool stream =
      body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  if (!stream) {
    co_await w.Send(200, JsonHeaders(), FullResponse(chat, model));
    completed.fetch_add(1);
    co_return;
  }
  if (!co_await w.BeginStream(200, SseHeaders())) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (int i = 0; i <= config.chunks; ++i) {
    if (config.chunk_delay_ms > 0) {
      timer.expires_after(std::chrono::milliseconds(config.chunk_delay_ms));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (w.client_gone() || !co_await w.WriteChunk(StreamChunk(chat, model, i))) {
      cancelled.fetch_add(1);
      co_return;
    }
  }
  if (WantsUsage(body)) co_await w.WriteChunk(UsageChunk(chat, model));
  co_await w.WriteChunk("data: [DONE]\n\n");
  co_await w.EndStream();
  completed.fetch_add(1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fake OpenAI-compatible worker for tests"};
  int port = 0;
  int threads = 1;
  int kv_port = -1;
  app.add_option("--port", port, "listen port (0: any)");
  app.add_option("--threads", threads, "event-loop threads");
  app.add_option("--chunks", config.chunks, "content chunks per response");
  app.add_option("--chunk-delay-ms", config.chunk_delay_ms, "delay before each chunk");
  app.add_option("--fail-status", config.fail_status, "answer every request with this status");
  app.add_option("--name", config.name, "name reported in responses");
  app.add_option("--kv-events-port", kv_port, "publish KV events on this port (0: any)");
  app.add_option("--block-size", config.block_size, "KV block size");
  CLI11_PARSE(app, argc, argv);

  if (kv_port >= 0) {
    infera::events::PublisherOptions popt;
    popt.pub_endpoint = "tcp://127.0.0.1:" + std::to_string(kv_port);
    auto pub = infera::events::EventPublisher::Create(popt);
    if (!pub.ok()) {
      std::cerr << pub.status() << "\n";
      return 1;
    }
    publisher = std::move(*pub);
    std::cout << "fake-worker kv-events on " << publisher->pub_endpoint() << std::endl;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  infera::http::IoPool pool(threads);
  infera::http::ServerOptions opt;
  opt.host = "127.0.0.1";
  opt.port = static_cast<uint16_t>(port);
  opt.drain_timeout_ms = 2000;
  infera::http::Server server(pool, opt, Handle);
  if (auto s = server.Listen(); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  server.Start();
  pool.Start();
  std::cout << "fake-worker listening on " << server.port() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  server.Shutdown();
  pool.Stop();
  return 0;
}
