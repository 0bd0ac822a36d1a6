// infera-mock-engine: a simulated vLLM/SGLang worker (doc/sim.md). Wiring only.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>

#include "discovery/etcd_registrar.h"
#include "engine_runner.h"
#include "http/io_pool.h"
#include "http/server.h"
#include "mock_server.h"
#include "pd_role.h"
#include "prompt_tokenizer.h"
#include "sim/engine_flags.h"
#include "sim/kv_transfer.h"
#include "transport/nats_request_flags.h"
#include "transport/nats_request_server.h"

int main(int argc, char** argv) {
  CLI::App app{"infera-mock-engine: a simulated vLLM/SGLang worker"};
  std::string host = "0.0.0.0";
  uint16_t port = 8000;
  std::string engine_kind = "vllm", role = "mixed", tokenizer_dir;
  infera::mock::RunnerOptions runner_options;
  infera::mock::MockServerOptions server_options;
  std::string etcd_endpoint, advertise_host = "127.0.0.1";
  int io_threads = 2;
  std::string pd_protocol;
  infera::mock::PdOptions pd_options;
  uint16_t bootstrap_port = 0;
  app.add_option("--host", host, "listen address");
  app.add_option("--port", port, "HTTP port (0: the OS picks; printed on stdout)");
  app.add_option("--model-name", server_options.model_name, "served model name");
  app.add_option("--engine", engine_kind, "KV-event wire shape")
      ->check(CLI::IsMember({"vllm", "vllm-array", "sglang"}));
  app.add_option("--role", role, "disaggregation role")
      ->check(CLI::IsMember({"mixed", "prefill", "decode"}));
  app.add_option("--pd-protocol", pd_protocol, "PD protocol of a prefill/decode worker (doc/pd.md)")
      ->check(CLI::IsMember({"sglang-bootstrap", "vllm-nixl", "vllm-mooncake"}));
  app.add_option("--engine-id", pd_options.engine_id,
                 "vLLM engine id (default: mock-engine-<port>)");
  app.add_option("--bootstrap-port", bootstrap_port,
                 "prefill: port of the bootstrap / side-channel listener (0: the OS picks)");
  app.add_option("--pd-kv-wait-ms", pd_options.kv_wait_ms,
                 "decode: how long the prefill's KV may take to appear")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--pd-kv-hold-ms", pd_options.kv_hold_ms,
                 "prefill: how long computed KV waits for its decode leg")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  infera::sim::AddKvTransferFlags(app, pd_options.transfer);
  infera::sim::AddEngineFlags(app, runner_options.engine);
  app.add_option("--kv-events-endpoint", runner_options.events_endpoint,
                 "ZMQ PUB bind endpoint of rank 0 (rank r: port + r)");
  app.add_option("--kv-replay-endpoint", runner_options.replay_endpoint,
                 "ZMQ ROUTER replay endpoint of rank 0 (empty: none)");
  app.add_option("--kv-events-topic", runner_options.topic, "topic frame of every message");
  app.add_option("--tokenizer", tokenizer_dir,
                 "directory with tokenizer.json (+ chat template), or a Hugging Face model id in "
                 "the hub cache");
  bool render_differently = false;
  app.add_flag("--render-differently", render_differently,
               "fault: append one token to every prompt rendered or tokenized from text "
               "(/tokenize too), so the router's render-parity probe sees it diverge");
  app.add_option("--dp-size", runner_options.dp_size, "data-parallel ranks")
      ->check(CLI::Range(1, 64));
  app.add_option("--etcd-endpoint", etcd_endpoint, "register in etcd (host:port)");
  app.add_option("--advertise-host", advertise_host, "host in the registered worker record");
  app.add_option("--drop-event-fraction", runner_options.drop_event_fraction,
                 "fault: drop this fraction of event batches from the live stream")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--reorder-event-fraction", runner_options.reorder_event_fraction,
                 "fault: deliver this fraction of event batches late")
      ->check(CLI::Range(0.0, 1.0));
  std::vector<std::string> lora_modules;
  app.add_option("--lora-modules", lora_modules,
                 "LoRA adapters served beside the model, as vLLM's NAME=PATH (the path is "
                 "ignored) or NAME; a request whose model names one hashes its blocks with it")
      ->delimiter(',');
  app.add_option("--kv-events-extra-keys", runner_options.kv_events_extra_keys,
                 "vLLM-shaped BlockStored events carry extra_keys (LoRA name, cache_salt) as "
                 "vLLM does today; false: omitted, as older vLLM does (SGLang: never)");
  app.add_option("--kv-events-hash-seed", runner_options.kv_events_hash_seed,
                 "fault: publish token ids the router's hashes cannot match, as a hash seed "
                 "it does not share would (0: faithful)");
  bool unstable_hash_seed = false;
  app.add_flag("--unstable-hash-seed", unstable_hash_seed,
               "fault: draw the engine's block-hash seed at random at every start (vLLM without "
               "PYTHONHASHSEED: the same tokens hash differently after a restart)");
  app.add_option("--fail-fraction", server_options.fail_fraction,
                 "fault: answer this fraction of generation requests with 500")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--stall-after-requests", runner_options.stall_after_requests,
                 "fault: stall once after this many requests");
  app.add_option("--stall-ms", runner_options.stall_ms, "fault: stall duration");
  app.add_option("--die-after", server_options.die_after_requests,
                 "fault: exit(3) after serving this many generation requests");
  app.add_option("--seed", runner_options.seed, "seed of the fault injection");
  app.add_option("--io-threads", io_threads, "HTTP event loops")->check(CLI::Range(1, 64));
  std::string request_transport = "http", nats_url = "nats://127.0.0.1:4222";
  app.add_option("--request-transport", request_transport,
                 "http | nats: also serve requests from NATS subject infera.req.<base64url("
                 "<advertise-host>:<port>)> through the NATS request server infera-register "
                 "runs (doc/nats-request-transport.md)")
      ->check(CLI::IsMember({"http", "nats"}))
      ->capture_default_str();
  app.add_option("--nats-server", nats_url, "NATS server URL(s) for --request-transport nats")
      ->capture_default_str();
  infera::transport::NatsRequestFlags nats_request_flags;
  nats_request_flags.Add(app, infera::transport::NatsRequestFlags::Side::kWorker);
  CLI11_PARSE(app, argc, argv);
  if ((role == "mixed") != pd_protocol.empty()) {
    std::fprintf(stderr, "infera-mock-engine: --role %s %s --pd-protocol\n", role.c_str(),
                 role == "mixed" ? "takes no" : "needs");
    return 2;
  }
  pd_options.role = role == "prefill"  ? infera::discovery::DisaggMode::kPrefill
                    : role == "decode" ? infera::discovery::DisaggMode::kDecode
                                       : infera::discovery::DisaggMode::kMixed;
  pd_options.protocol = *infera::discovery::ParsePdProtocol(pd_protocol);
  pd_options.advertise_host = advertise_host;
  pd_options.block_size = runner_options.engine.block_size;
  pd_options.speedup = runner_options.engine.timing.speedup;
  server_options.seed = runner_options.seed;
  for (const std::string& m : lora_modules) {
    std::string name = m.substr(0, m.find('='));
    if (name.empty()) {
      std::fprintf(stderr, "infera-mock-engine: --lora-modules: empty adapter name in '%s'\n",
                   m.c_str());
      return 2;
    }
    server_options.lora_modules.push_back(std::move(name));
  }
  runner_options.engine.track_router_hashes = true;
  if (unstable_hash_seed) {
    std::random_device rd;
    runner_options.engine.hash_seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  runner_options.shape = engine_kind == "sglang"       ? infera::events::WireShape::kSglang
                         : engine_kind == "vllm-array" ? infera::events::WireShape::kVllmArray
                                                       : infera::events::WireShape::kVllm;

  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server_options.sglang = engine_kind == "sglang";
  auto tokenizer = infera::mock::PromptTokenizer::Load(tokenizer_dir, render_differently);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "infera-mock-engine: tokenizer: %s\n",
                 std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  auto runner = infera::mock::EngineRunner::Create(runner_options);
  if (!runner.ok()) {
    std::fprintf(stderr, "infera-mock-engine: %s\n",
                 std::string(runner.status().message()).c_str());
    return 2;
  }
  infera::mock::MockServer mock(**runner, **tokenizer, server_options);
  infera::http::IoPool pool(io_threads);
  infera::http::ServerOptions http_options;
  http_options.host = host;
  http_options.port = port;
  http_options.max_body_bytes = 64ull << 20;
  infera::http::Server server(pool, http_options,
                              [&mock](infera::http::Request& req, infera::http::ResponseWriter& w) {
                                return mock.Handle(req, w);
                              });
  if (absl::Status s = server.Listen(); !s.ok()) {
    std::fprintf(stderr, "infera-mock-engine: listen: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (pd_options.engine_id.empty()) {
    pd_options.engine_id = "mock-engine-" + std::to_string(server.port());
  }
  std::unique_ptr<infera::mock::PdRole> pd;
  std::unique_ptr<infera::http::Server> bootstrap;
  if (pd_options.role != infera::discovery::DisaggMode::kMixed) {
    pd = std::make_unique<infera::mock::PdRole>(pd_options, pool);
    mock.set_pd(pd.get());
  }
  if (pd_options.role == infera::discovery::DisaggMode::kPrefill) {
    infera::http::ServerOptions bootstrap_options;
    bootstrap_options.host = host;
    bootstrap_options.port = bootstrap_port;
    bootstrap = std::make_unique<infera::http::Server>(
        pool, bootstrap_options,
        [role = pd.get()](infera::http::Request& req, infera::http::ResponseWriter& w) {
          return role->HandleBootstrap(req, w);
        });
    if (absl::Status s = bootstrap->Listen(); !s.ok()) {
      std::fprintf(stderr, "infera-mock-engine: bootstrap listen: %s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
    pd->set_bootstrap_port(bootstrap->port());
    bootstrap->Start();
  }
  server.Start();
  pool.Start();
  std::printf("infera-mock-engine listening port=%u", server.port());
  if (bootstrap) std::printf(" bootstrap=%u", bootstrap->port());
  for (const std::string& e : (*runner)->EventEndpoints()) std::printf(" events=%s", e.c_str());
  for (const std::string& e : (*runner)->ReplayEndpoints()) {
    if (!e.empty()) std::printf(" replay=%s", e.c_str());
  }
  std::printf("\n");
  std::fflush(stdout);

  // --request-transport nats: the same NATS request server as infera-register's sidecar,
  // proxying to this engine's own HTTP listener.
  std::unique_ptr<infera::transport::NatsRequestServer> nats_requests;
  if (request_transport == "nats") {
    auto timeouts = nats_request_flags.Resolve();
    if (!timeouts.ok()) {
      std::fprintf(stderr, "infera-mock-engine: %s\n",
                   std::string(timeouts.status().message()).c_str());
      server.Shutdown();
      pool.Stop();
      return 2;
    }
    infera::transport::NatsRequestServerOptions nats_options;
    nats_options.worker_id = advertise_host + ":" + std::to_string(server.port());
    nats_options.engine.host = host == "0.0.0.0" || host.empty() ? "127.0.0.1" : host;
    nats_options.engine.port = server.port();
    nats_options.nats_url = nats_url;
    nats_options.idle_timeout_ms = timeouts->idle_timeout_ms;
    nats_options.max_duration_ms = timeouts->max_duration_ms;
    nats_requests = std::make_unique<infera::transport::NatsRequestServer>(nats_options, pool);
    if (absl::Status s = nats_requests->Start(); !s.ok()) {
      std::fprintf(stderr, "infera-mock-engine: %s\n", std::string(s.message()).c_str());
      nats_requests.reset();
      server.Shutdown();
      pool.Stop();
      return 2;
    }
  }

  std::unique_ptr<infera::discovery::EtcdRegistrar> registrar;
  if (!etcd_endpoint.empty()) {
    auto with_host = [&](const std::string& bound) {
      const size_t colon = bound.rfind(':');
      return bound.empty() ? bound : "tcp://" + advertise_host + bound.substr(colon);
    };
    infera::discovery::WorkerRecord record;
    record.worker_id = advertise_host + ":" + std::to_string(server.port());
    record.url = "http://" + record.worker_id;
    record.model_name = server_options.model_name;
    record.lora_adapters = server_options.lora_modules;
    record.engine = engine_kind == "sglang" ? "sglang" : "vllm";
    record.disagg_mode = pd_options.role;
    record.disagg_protocol = pd_protocol;
    if (bootstrap) {
      const std::string port = std::to_string(bootstrap->port());
      if (pd_options.protocol == infera::discovery::PdProtocol::kSglangBootstrap) {
        record.disagg_params_json =
            R"({"bootstrap_host":")" + advertise_host + R"(","bootstrap_port":)" + port + "}";
      } else if (pd_options.protocol == infera::discovery::PdProtocol::kVllmMooncake) {
        record.disagg_params_json = R"({"bootstrap_addr":")" + advertise_host + ":" + port +
                                    R"(","engine_id":")" + pd_options.engine_id + R"("})";
      }
    }
    record.kv_events_endpoint = with_host((*runner)->EventEndpoints()[0]);
    record.kv_replay_endpoint = with_host((*runner)->ReplayEndpoints()[0]);
    record.kv_block_size = static_cast<uint32_t>(runner_options.engine.block_size);
    record.dp_size = runner_options.dp_size;
    record.num_gpu_blocks = static_cast<uint32_t>(runner_options.engine.num_gpu_blocks);
    record.request_transport = request_transport;
    infera::discovery::EtcdRegistrarOptions etcd_options;
    etcd_options.client.endpoints = etcd_endpoint;
    auto created = infera::discovery::EtcdRegistrar::Create(record, etcd_options);
    if (!created.ok()) {
      std::fprintf(stderr, "infera-mock-engine: etcd: %s\n",
                   std::string(created.status().message()).c_str());
      server.Shutdown();
      pool.Stop();
      return 2;
    }
    registrar = std::move(*created);
    registrar->Start();
  }

  int sig = 0;
  sigwait(&signals, &sig);
  if (registrar) (void)registrar->Stop();
  if (nats_requests) nats_requests->Stop();
  if (bootstrap) bootstrap->Shutdown();
  server.Shutdown();
  pool.Stop();
  return 0;
}
