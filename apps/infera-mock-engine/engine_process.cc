#include "engine_process.h"

#include <cstdio>
#include <string>
#include <utility>

namespace infera::mock {
namespace {

absl::Status Prefixed(std::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

}  // namespace

EngineProcess::EngineProcess(MockFlags& flags) : flags_(flags) {}

absl::Status EngineProcess::Start() {
  auto tokenizer = PromptTokenizer::Load(flags_.tokenizer_dir, flags_.render_differently);
  if (!tokenizer.ok()) return Prefixed("tokenizer: ", tokenizer.status());
  tokenizer_ = *std::move(tokenizer);
  auto runner = EngineRunner::Create(flags_.runner_options);
  if (!runner.ok()) return runner.status();
  runner_ = *std::move(runner);
  mock_ = std::make_unique<MockServer>(*runner_, *tokenizer_, flags_.server_options);
  pool_ = std::make_unique<http::IoPool>(flags_.io_threads);
  if (absl::Status s = Listen(); !s.ok()) return s;
  server_->Start();
  pool_->Start();
  PrintListening();
  if (absl::Status s = StartNatsRequests(); !s.ok()) return s;
  return Register();
}

absl::Status EngineProcess::Listen() {
  http::ServerOptions http_options;
  http_options.host = flags_.host;
  http_options.port = flags_.port;
  http_options.max_body_bytes = 64ull << 20;
  server_ = std::make_unique<http::Server>(
      *pool_, http_options, [mock = mock_.get()](http::Request& req, http::ResponseWriter& w) {
        return mock->Handle(req, w);
      });
  if (absl::Status s = server_->Listen(); !s.ok()) return Prefixed("listen: ", s);
  PdOptions& pd = flags_.pd_options;
  if (pd.engine_id.empty()) pd.engine_id = "mock-engine-" + std::to_string(server_->port());
  if (pd.role != discovery::DisaggMode::kMixed) {
    pd_ = std::make_unique<PdRole>(pd, *pool_);
    mock_->set_pd(pd_.get());
  }
  if (pd.role == discovery::DisaggMode::kPrefill) return ListenBootstrap();
  return absl::OkStatus();
}

absl::Status EngineProcess::ListenBootstrap() {
  http::ServerOptions bootstrap_options;
  bootstrap_options.host = flags_.host;
  bootstrap_options.port = flags_.bootstrap_port;
  bootstrap_ = std::make_unique<http::Server>(
      *pool_, bootstrap_options, [role = pd_.get()](http::Request& req, http::ResponseWriter& w) {
        return role->HandleBootstrap(req, w);
      });
  if (absl::Status s = bootstrap_->Listen(); !s.ok()) return Prefixed("bootstrap listen: ", s);
  pd_->set_bootstrap_port(bootstrap_->port());
  bootstrap_->Start();
  return absl::OkStatus();
}

void EngineProcess::PrintListening() const {
  std::printf("infera-mock-engine listening port=%u", server_->port());
  if (bootstrap_) std::printf(" bootstrap=%u", bootstrap_->port());
  for (const std::string& e : runner_->EventEndpoints()) std::printf(" events=%s", e.c_str());
  for (const std::string& e : runner_->ReplayEndpoints()) {
    if (!e.empty()) std::printf(" replay=%s", e.c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
}

// --request-transport nats: the same NATS request server as infera-register's sidecar,
// proxying to this engine's own HTTP listener.
absl::Status EngineProcess::StartNatsRequests() {
  if (flags_.request_transport != "nats") return absl::OkStatus();
  auto timeouts = flags_.nats_request_flags.Resolve();
  if (!timeouts.ok()) {
    StopServer();
    return timeouts.status();
  }
  const std::string& host = flags_.host;
  transport::NatsRequestServerOptions nats_options;
  nats_options.worker_id = flags_.advertise_host + ":" + std::to_string(server_->port());
  nats_options.engine.host = host == "0.0.0.0" || host.empty() ? "127.0.0.1" : host;
  nats_options.engine.port = server_->port();
  nats_options.nats_url = flags_.nats_url;
  nats_options.idle_timeout_ms = timeouts->idle_timeout_ms;
  nats_options.max_duration_ms = timeouts->max_duration_ms;
  nats_requests_ = std::make_unique<transport::NatsRequestServer>(nats_options, *pool_);
  if (absl::Status s = nats_requests_->Start(); !s.ok()) {
    nats_requests_.reset();
    StopServer();
    return s;
  }
  return absl::OkStatus();
}

absl::Status EngineProcess::Register() {
  if (flags_.etcd_endpoint.empty()) return absl::OkStatus();
  const std::string& advertise_host = flags_.advertise_host;
  auto with_host = [&](const std::string& bound) {
    const size_t colon = bound.rfind(':');
    return bound.empty() ? bound : "tcp://" + advertise_host + bound.substr(colon);
  };
  const PdOptions& pd = flags_.pd_options;
  discovery::WorkerRecord record;
  record.worker_id = advertise_host + ":" + std::to_string(server_->port());
  record.url = "http://" + record.worker_id;
  record.model_name = flags_.server_options.model_name;
  record.lora_adapters = flags_.server_options.lora_modules;
  record.engine = flags_.engine_kind == "sglang" ? "sglang" : "vllm";
  record.disagg_mode = pd.role;
  record.disagg_protocol = flags_.pd_protocol;
  if (bootstrap_) {
    const std::string port = std::to_string(bootstrap_->port());
    if (pd.protocol == discovery::PdProtocol::kSglangBootstrap) {
      record.disagg_params_json =
          R"({"bootstrap_host":")" + advertise_host + R"(","bootstrap_port":)" + port + "}";
    } else if (pd.protocol == discovery::PdProtocol::kVllmMooncake) {
      record.disagg_params_json = R"({"bootstrap_addr":")" + advertise_host + ":" + port +
                                  R"(","engine_id":")" + pd.engine_id + R"("})";
    }
  }
  record.kv_events_endpoint = with_host(runner_->EventEndpoints()[0]);
  record.kv_replay_endpoint = with_host(runner_->ReplayEndpoints()[0]);
  record.kv_block_size = static_cast<uint32_t>(flags_.runner_options.engine.block_size);
  record.dp_size = flags_.runner_options.dp_size;
  record.num_gpu_blocks = static_cast<uint32_t>(flags_.runner_options.engine.num_gpu_blocks);
  record.request_transport = flags_.request_transport;
  discovery::EtcdRegistrarOptions etcd_options;
  etcd_options.client.endpoints = flags_.etcd_endpoint;
  auto created = discovery::EtcdRegistrar::Create(record, etcd_options);
  if (!created.ok()) {
    StopServer();
    return Prefixed("etcd: ", created.status());
  }
  registrar_ = *std::move(created);
  registrar_->Start();
  return absl::OkStatus();
}

void EngineProcess::StopServer() {
  server_->Shutdown();
  pool_->Stop();
}

void EngineProcess::Stop() {
  if (registrar_) (void)registrar_->Stop();
  if (nats_requests_) nats_requests_->Stop();
  if (bootstrap_) bootstrap_->Shutdown();
  StopServer();
}

}  // namespace infera::mock
