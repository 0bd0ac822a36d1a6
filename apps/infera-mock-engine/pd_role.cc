#include "pd_role.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "core/hashing.h"

namespace infera::mock {
namespace {

using discovery::DisaggMode;
using discovery::PdProtocol;
using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

uint64_t PromptHash(std::span<const core::TokenId> prompt) { return core::HashChunk(0, prompt); }

const json* Find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool IsTrue(const json* v) { return v && v->is_boolean() && v->get<bool>(); }

absl::StatusOr<http::Endpoint> EndpointOf(std::string host_port) {
  if (host_port.rfind("http://", 0) != 0) host_port = "http://" + host_port;
  return http::ParseHttpUrl(host_port);
}

absl::StatusOr<std::string> StringField(const json& obj, const char* key, const char* where) {
  const json* v = Find(obj, key);
  if (!v || !v->is_string() || v->get<std::string>().empty()) {
    return Bad(std::string(where) + " needs '" + key + "' (a non-empty string)");
  }
  return v->get<std::string>();
}

}  // namespace

PdRole::PdRole(PdOptions options, http::IoPool& pool) : options_(std::move(options)), pool_(pool) {
  for (int i = 0; i < pool_.size(); ++i) {
    clients_.push_back(std::make_unique<http::Client>(pool_.executor(i)));
  }
}

absl::StatusOr<PdLeg> PdRole::Classify(const json& body, uint32_t dp_size,
                                       std::optional<uint32_t> header_rank) const {
  PdLeg leg;
  const json* room = Find(body, "bootstrap_room");
  const json* host = Find(body, "bootstrap_host");
  const json* port = Find(body, "bootstrap_port");
  const json* params = Find(body, "kv_transfer_params");
  const bool any = room || host || port || params;
  if (options_.role == DisaggMode::kMixed) return leg;  // a mixed worker ignores PD fields
  if (!any) {
    if (options_.role == DisaggMode::kPrefill) {
      return Bad("this is a " + std::string(discovery::PdProtocolName(options_.protocol)) +
                 " prefill worker: the request carries no PD fields");
    }
    return leg;  // a decode worker computes a request without PD fields itself
  }
  const bool prefill = options_.role == DisaggMode::kPrefill;
  leg.kind = prefill ? PdLeg::Kind::kPrefill : PdLeg::Kind::kDecode;
  switch (options_.protocol) {
    case PdProtocol::kSglangBootstrap: {
      if (!room || !room->is_number_unsigned() || room->get<uint64_t>() >= (uint64_t{1} << 63)) {
        return Bad("sglang-bootstrap needs 'bootstrap_room', an integer in [0, 2^63)");
      }
      if (!host || !host->is_string() || host->get<std::string>().empty()) {
        return Bad("sglang-bootstrap needs 'bootstrap_host' (a string)");
      }
      if (!port || !port->is_number_unsigned() || port->get<uint64_t>() == 0 ||
          port->get<uint64_t>() > 65535) {
        return Bad("sglang-bootstrap needs 'bootstrap_port' (an integer port)");
      }
      const uint64_t r = room->get<uint64_t>();
      leg.key = std::to_string(r);
      if (prefill) {
        leg.dp_rank = static_cast<uint32_t>(r % dp_size);
        if (header_rank && *header_rank != *leg.dp_rank) {
          return Bad("bootstrap_room % dp_size is " + std::to_string(*leg.dp_rank) +
                     " but X-Data-Parallel-Rank is " + std::to_string(*header_rank));
        }
      } else {
        auto ep =
            EndpointOf(host->get<std::string>() + ":" + std::to_string(port->get<uint64_t>()));
        if (!ep.ok()) return Bad("bad bootstrap_host/bootstrap_port");
        leg.source = *ep;
      }
      return leg;
    }
    case PdProtocol::kVllmNixl: {
      if (!params || !params->is_object()) return Bad("vllm-nixl needs 'kv_transfer_params'");
      if (prefill) {
        if (!IsTrue(Find(*params, "do_remote_decode"))) {
          return Bad("vllm-nixl prefill needs kv_transfer_params.do_remote_decode = true");
        }
        return leg;  // the key is made when the KV is held
      }
      if (!IsTrue(Find(*params, "do_remote_prefill"))) {
        return Bad("vllm-nixl decode needs kv_transfer_params.do_remote_prefill = true");
      }
      auto id = StringField(*params, "remote_request_id", "kv_transfer_params");
      if (!id.ok()) return id.status();
      auto engine = StringField(*params, "remote_engine_id", "kv_transfer_params");
      if (!engine.ok()) return engine.status();
      auto h = StringField(*params, "remote_host", "kv_transfer_params");
      if (!h.ok()) return h.status();
      const json* p = Find(*params, "remote_port");
      const json* blocks = Find(*params, "remote_block_ids");
      if (!p || !p->is_number_unsigned() || p->get<uint64_t>() == 0 || p->get<uint64_t>() > 65535) {
        return Bad("kv_transfer_params needs 'remote_port' (an integer port)");
      }
      if (!blocks || !blocks->is_array()) {
        return Bad("kv_transfer_params needs 'remote_block_ids' (an array)");
      }
      auto ep = EndpointOf(*h + ":" + std::to_string(p->get<uint64_t>()));
      if (!ep.ok()) return Bad("bad remote_host/remote_port");
      leg.key = *id;
      leg.remote_engine_id = *engine;
      leg.remote_blocks = blocks->size();
      leg.source = *ep;
      return leg;
    }
    case PdProtocol::kVllmMooncake: {
      if (!params || !params->is_object()) return Bad("vllm-mooncake needs 'kv_transfer_params'");
      auto id = StringField(*params, "transfer_id", "kv_transfer_params");
      if (!id.ok()) return id.status();
      leg.key = *id;
      if (prefill) {
        if (!IsTrue(Find(*params, "do_remote_decode"))) {
          return Bad("vllm-mooncake prefill needs kv_transfer_params.do_remote_decode = true");
        }
        return leg;
      }
      if (!IsTrue(Find(*params, "do_remote_prefill"))) {
        return Bad("vllm-mooncake decode needs kv_transfer_params.do_remote_prefill = true");
      }
      auto addr = StringField(*params, "remote_bootstrap_addr", "kv_transfer_params");
      if (!addr.ok()) return addr.status();
      auto engine = StringField(*params, "remote_engine_id", "kv_transfer_params");
      if (!engine.ok()) return engine.status();
      auto ep = EndpointOf(*addr);
      if (!ep.ok()) return Bad("bad remote_bootstrap_addr '" + *addr + "'");
      leg.source = *ep;
      leg.remote_engine_id = *engine;
      return leg;
    }
    case PdProtocol::kNone:
      break;
  }
  return Bad("this worker has no PD protocol");
}

json PdRole::Hold(const PdLeg& leg, std::span<const core::TokenId> prompt) {
  std::string key = leg.key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.protocol == PdProtocol::kVllmNixl) {
      key = options_.engine_id + "-req-" + std::to_string(next_request_++);
    }
    const int64_t now = NowMs();
    absl::erase_if(held_, [&](const auto& e) { return e.second.expires_ms < now; });
    held_[key] = Held{PromptHash(prompt), prompt.size(), now + options_.kv_hold_ms};
  }
  held_total_.fetch_add(1);
  if (options_.protocol != PdProtocol::kVllmNixl) return nullptr;
  const size_t blocks = (prompt.size() + options_.block_size - 1) / options_.block_size;
  std::vector<uint64_t> block_ids(blocks);
  for (size_t i = 0; i < blocks; ++i) block_ids[i] = i;
  return {{"kv_transfer_params",
           {{"do_remote_prefill", true},
            {"do_remote_decode", false},
            {"remote_block_ids", block_ids},
            {"remote_engine_id", options_.engine_id},
            {"remote_host", options_.advertise_host},
            {"remote_port", options_.bootstrap_port},
            {"remote_request_id", key},
            {"tp_size", 1}}}};
}

std::optional<PdRole::Held> PdRole::Take(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(key);
  if (it == held_.end() || it->second.expires_ms < NowMs()) return std::nullopt;
  Held h = it->second;
  held_.erase(it);
  return h;
}

http::Awaitable<void> PdRole::HandleBootstrap(http::Request& req, http::ResponseWriter& w) {
  http::Headers headers;
  headers.Add("Content-Type", "application/json");
  if (req.method != "GET" || req.path() != "/pd/kv") {
    co_await w.Send(404, headers, R"({"error":"not a bootstrap route"})");
    co_return;
  }
  const std::string key = req.QueryParam("key");
  int64_t wait_ms = 0;
  const std::string wait = req.QueryParam("wait_ms");
  (void)std::from_chars(wait.data(), wait.data() + wait.size(), wait_ms);
  wait_ms = std::clamp<int64_t>(wait_ms, 0, 600'000);
  const int64_t deadline = NowMs() + wait_ms;
  http::asio::steady_timer timer(co_await http::asio::this_coro::executor);
  while (true) {
    if (std::optional<Held> h = Take(key)) {
      served_total_.fetch_add(1);
      const json out = {{"prompt_tokens", h->prompt_tokens},
                        {"prompt_hash", h->prompt_hash},
                        {"engine_id", options_.engine_id}};
      co_await w.Send(200, headers, out.dump());
      co_return;
    }
    if (NowMs() >= deadline || w.client_gone()) break;
    timer.expires_after(std::chrono::milliseconds(2));
    boost::system::error_code ec;
    co_await timer.async_wait(http::asio::redirect_error(http::asio::use_awaitable, ec));
  }
  const json out = {{"error", "no KV held for key '" + key + "'"}};
  co_await w.Send(404, headers, out.dump());
}

http::Awaitable<absl::Status> PdRole::Receive(const PdLeg& leg,
                                              std::span<const core::TokenId> prompt,
                                              size_t local_cached_tokens) {
  auto fail = [this](std::string what) {
    failed_total_.fetch_add(1);
    return absl::InternalError("KV transfer failed: " + what);
  };
  const int index = std::max(0, http::IoPool::CurrentIndex());
  http::Client& client = *clients_[static_cast<size_t>(index) % clients_.size()];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.kv_wait_ms + 5000);
  const std::string target =
      "/pd/kv?key=" + leg.key + "&wait_ms=" + std::to_string(options_.kv_wait_ms);
  absl::StatusOr<http::ClientResponse> got =
      co_await client.Fetch(leg.source, "GET", target, http::Headers(), "", deadline);
  if (!got.ok()) {
    co_return fail("cannot reach the prefill worker at " + leg.source.HostPort() + ": " +
                   std::string(got.status().message()));
  }
  if (got->status != 200) {
    co_return fail("the prefill worker at " + leg.source.HostPort() + " holds no KV for '" +
                   leg.key + "'");
  }
  json held = json::parse(got->body, nullptr, false);
  if (!held.is_object() || !held.value("prompt_hash", json()).is_number_unsigned() ||
      !held.value("prompt_tokens", json()).is_number_unsigned() ||
      !held.value("engine_id", json()).is_string()) {
    co_return fail("bad bootstrap answer");
  }
  if (held["prompt_hash"].get<uint64_t>() != PromptHash(prompt) ||
      held["prompt_tokens"].get<size_t>() != prompt.size()) {
    co_return fail("the prefill worker computed a different prompt (" +
                   std::to_string(held["prompt_tokens"].get<size_t>()) + " tokens, here " +
                   std::to_string(prompt.size()) + ")");
  }
  if (!leg.remote_engine_id.empty() && held["engine_id"] != leg.remote_engine_id) {
    co_return fail("remote_engine_id '" + leg.remote_engine_id + "' is not the prefill's '" +
                   held["engine_id"].get<std::string>() + "'");
  }
  const size_t blocks = (prompt.size() + options_.block_size - 1) / options_.block_size;
  if (leg.remote_blocks && *leg.remote_blocks != blocks) {
    co_return fail("remote_block_ids has " + std::to_string(*leg.remote_blocks) +
                   " blocks, the prompt " + std::to_string(blocks));
  }
  const size_t moved = prompt.size() - std::min(prompt.size(), local_cached_tokens);
  const auto transfer_ns = static_cast<int64_t>(
      static_cast<double>(options_.transfer.TransferNs(moved)) / options_.speedup);
  if (transfer_ns > 0) {
    http::asio::steady_timer timer(co_await http::asio::this_coro::executor);
    timer.expires_after(std::chrono::nanoseconds(transfer_ns));
    boost::system::error_code ec;
    co_await timer.async_wait(http::asio::redirect_error(http::asio::use_awaitable, ec));
  }
  received_total_.fetch_add(1);
  co_return absl::OkStatus();
}

std::string PdRole::MetricsText() const {
  return "infera_mock_pd_kv_held_total " + std::to_string(held_total_.load()) + "\n" +
         "infera_mock_pd_kv_served_total " + std::to_string(served_total_.load()) + "\n" +
         "infera_mock_pd_kv_received_total " + std::to_string(received_total_.load()) + "\n" +
         "infera_mock_pd_kv_failed_total " + std::to_string(failed_total_.load()) + "\n";
}

}  // namespace infera::mock
