#include "mock_flags.h"

#include "discovery/disagg_meta.h"
#include "sim/engine_flags.h"
#include "sim/kv_transfer.h"

namespace infera::mock {
namespace {

// What the worker is: listener, engine shape, PD role, KV events, tokenizer.
void AddWorkerFlags(CLI::App& app, MockFlags& f) {
  app.add_option("--host", f.host, "listen address");
  app.add_option("--port", f.port, "HTTP port (0: the OS picks; printed on stdout)");
  app.add_option("--model-name", f.server_options.model_name, "served model name");
  app.add_option("--engine", f.engine_kind, "KV-event wire shape")
      ->check(CLI::IsMember({"vllm", "vllm-array", "sglang"}));
  app.add_option("--role", f.role, "disaggregation role")
      ->check(CLI::IsMember({"mixed", "prefill", "decode"}));
  app.add_option("--pd-protocol", f.pd_protocol,
                 "PD protocol of a prefill/decode worker (doc/pd.md)")
      ->check(CLI::IsMember(discovery::PdProtocolNames()));
  app.add_option("--engine-id", f.pd_options.engine_id,
                 "vLLM engine id (default: mock-engine-<port>)");
  app.add_option("--bootstrap-port", f.bootstrap_port,
                 "prefill: port of the bootstrap / side-channel listener (0: the OS picks)");
  app.add_option("--pd-kv-wait-ms", f.pd_options.kv_wait_ms,
                 "decode: how long the prefill's KV may take to appear")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_option("--pd-kv-hold-ms", f.pd_options.kv_hold_ms,
                 "prefill: how long computed KV waits for its decode leg")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  sim::AddKvTransferFlags(app, f.pd_options.transfer);
  sim::AddEngineFlags(app, f.runner_options.engine);
  app.add_option("--kv-events-endpoint", f.runner_options.events_endpoint,
                 "ZMQ PUB bind endpoint of rank 0 (rank r: port + r)");
  app.add_option("--kv-replay-endpoint", f.runner_options.replay_endpoint,
                 "ZMQ ROUTER replay endpoint of rank 0 (empty: none)");
  app.add_option("--kv-events-topic", f.runner_options.topic, "topic frame of every message");
  app.add_option("--tokenizer", f.tokenizer_dir,
                 "directory with tokenizer.json (+ chat template), or a Hugging Face model id in "
                 "the hub cache");
  app.add_flag("--render-differently", f.render_differently,
               "fault: append one token to every prompt rendered or tokenized from text "
               "(/tokenize too), so the router's render-parity probe sees it diverge");
  app.add_option("--dp-size", f.runner_options.dp_size, "data-parallel ranks")
      ->check(CLI::Range(1, 64));
}

// Registration, fault injection, event loops and the NATS request transport.
void AddFleetAndFaultFlags(CLI::App& app, MockFlags& f) {
  app.add_option("--etcd-endpoint", f.etcd_endpoint, "register in etcd (host:port)");
  app.add_option("--advertise-host", f.advertise_host, "host in the registered worker record");
  app.add_option("--drop-event-fraction", f.runner_options.drop_event_fraction,
                 "fault: drop this fraction of event batches from the live stream")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--reorder-event-fraction", f.runner_options.reorder_event_fraction,
                 "fault: deliver this fraction of event batches late")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--lora-modules", f.lora_modules,
                 "LoRA adapters served beside the model, as vLLM's NAME=PATH (the path is "
                 "ignored) or NAME; a request whose model names one hashes its blocks with it")
      ->delimiter(',');
  app.add_option("--kv-events-extra-keys", f.runner_options.kv_events_extra_keys,
                 "vLLM-shaped BlockStored events carry extra_keys (LoRA name, cache_salt) as "
                 "vLLM does today; false: omitted, as older vLLM does (SGLang: never)");
  app.add_option("--kv-events-hash-seed", f.runner_options.kv_events_hash_seed,
                 "fault: publish token ids the router's hashes cannot match, as a hash seed "
                 "it does not share would (0: faithful)");
  app.add_flag("--unstable-hash-seed", f.unstable_hash_seed,
               "fault: draw the engine's block-hash seed at random at every start (vLLM without "
               "PYTHONHASHSEED: the same tokens hash differently after a restart)");
  app.add_option("--fail-fraction", f.server_options.fail_fraction,
                 "fault: answer this fraction of generation requests with 500")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--stall-after-requests", f.runner_options.stall_after_requests,
                 "fault: stall once after this many requests");
  app.add_option("--stall-ms", f.runner_options.stall_ms, "fault: stall duration");
  app.add_option("--die-after", f.server_options.die_after_requests,
                 "fault: exit(3) after serving this many generation requests");
  app.add_option("--seed", f.runner_options.seed, "seed of the fault injection");
  app.add_option("--io-threads", f.io_threads, "HTTP event loops")->check(CLI::Range(1, 64));
  app.add_option("--request-transport", f.request_transport,
                 "http | nats: also serve requests from NATS subject infera.req.<base64url("
                 "<advertise-host>:<port>)> through the NATS request server infera-register "
                 "runs (doc/nats-request-transport.md)")
      ->check(CLI::IsMember({"http", "nats"}))
      ->capture_default_str();
  app.add_option("--nats-server", f.nats_url, "NATS server URL(s) for --request-transport nats")
      ->capture_default_str();
  f.nats_request_flags.Add(app, transport::NatsRequestFlags::Side::kWorker);
}

}  // namespace

void AddMockFlags(CLI::App& app, MockFlags& flags) {
  AddWorkerFlags(app, flags);
  AddFleetAndFaultFlags(app, flags);
}

absl::Status ResolveMockFlags(MockFlags& f, const std::function<uint32_t()>& random_word) {
  if ((f.role == "mixed") != f.pd_protocol.empty()) {
    return absl::InvalidArgumentError(
        "--role " + f.role + " " + (f.role == "mixed" ? "takes no" : "needs") + " --pd-protocol");
  }
  PdOptions& pd = f.pd_options;
  pd.role = f.role == "prefill"  ? discovery::DisaggMode::kPrefill
            : f.role == "decode" ? discovery::DisaggMode::kDecode
                                 : discovery::DisaggMode::kMixed;
  pd.protocol = *discovery::ParsePdProtocol(f.pd_protocol);
  pd.advertise_host = f.advertise_host;
  pd.block_size = f.runner_options.engine.block_size;
  pd.speedup = f.runner_options.engine.timing.speedup;
  f.server_options.seed = f.runner_options.seed;
  for (const std::string& m : f.lora_modules) {
    std::string name = m.substr(0, m.find('='));
    if (name.empty()) {
      return absl::InvalidArgumentError("--lora-modules: empty adapter name in '" + m + "'");
    }
    f.server_options.lora_modules.push_back(std::move(name));
  }
  f.runner_options.engine.track_router_hashes = true;
  if (f.unstable_hash_seed) {
    const uint64_t high = random_word();
    f.runner_options.engine.hash_seed = (high << 32) ^ random_word();
  }
  f.runner_options.shape = f.engine_kind == "sglang"       ? events::WireShape::kSglang
                           : f.engine_kind == "vllm-array" ? events::WireShape::kVllmArray
                                                           : events::WireShape::kVllm;
  f.server_options.sglang = f.engine_kind == "sglang";
  return absl::OkStatus();
}

}  // namespace infera::mock
