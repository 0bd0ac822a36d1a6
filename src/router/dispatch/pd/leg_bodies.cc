#include "router/dispatch/pd/leg_bodies.h"

#include "absl/status/status.h"

namespace infera::pd {
namespace {

using nlohmann::json;

// The prefill-only rewrite both vLLM connectors share.
json PrefillOnly(json body, json kv_transfer_params) {
  body["kv_transfer_params"] = std::move(kv_transfer_params);
  body["stream"] = false;
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  for (const char* key : {"stream_options", "min_tokens", "min_completion_tokens"}) {
    body.erase(key);
  }
  return body;
}

void DecrementAtLeastOne(json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_number_integer()) return;
  const int64_t v = it->get<int64_t>();
  if (v > 1) *it = v - 1;
}

}  // namespace

json SglangLegBody(json body, std::string_view bootstrap_host, uint32_t bootstrap_port,
                   uint64_t bootstrap_room) {
  body["bootstrap_host"] = std::string(bootstrap_host);
  body["bootstrap_port"] = bootstrap_port;
  body["bootstrap_room"] = bootstrap_room;
  return body;
}

json NixlPrefillBody(json body) {
  return PrefillOnly(std::move(body), {{"do_remote_decode", true},
                                       {"do_remote_prefill", false},
                                       {"remote_engine_id", nullptr},
                                       {"remote_block_ids", nullptr},
                                       {"remote_host", nullptr},
                                       {"remote_port", nullptr}});
}

absl::StatusOr<json> NixlDecodeBody(json body, const json& prefill_response) {
  auto it = prefill_response.is_object() ? prefill_response.find("kv_transfer_params")
                                         : prefill_response.end();
  if (!prefill_response.is_object() || it == prefill_response.end() || !it->is_object() ||
      it->empty()) {
    return absl::FailedPreconditionError(
        "the prefill worker's answer carries no kv_transfer_params");
  }
  body["kv_transfer_params"] = *it;
  return body;
}

std::string MooncakeTransferId(std::string_view request_id) {
  return "xfer-" + std::string(request_id);
}

json MooncakePrefillBody(json body, std::string_view transfer_id) {
  return PrefillOnly(std::move(body), {{"do_remote_decode", true},
                                       {"do_remote_prefill", false},
                                       {"transfer_id", std::string(transfer_id)}});
}

json MooncakeDecodeBody(json body, std::string_view transfer_id, std::string_view bootstrap_addr,
                        std::string_view engine_id) {
  body["kv_transfer_params"] = {{"do_remote_decode", false},
                                {"do_remote_prefill", true},
                                {"remote_bootstrap_addr", "http://" + std::string(bootstrap_addr)},
                                {"remote_engine_id", std::string(engine_id)},
                                {"transfer_id", std::string(transfer_id)}};
  DecrementAtLeastOne(body, "max_tokens");
  DecrementAtLeastOne(body, "max_completion_tokens");
  return body;
}

}  // namespace infera::pd
