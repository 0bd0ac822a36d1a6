// The request bodies of the two legs of each PD protocol (doc/pd.md §3, where each
// rule's source in SGLang's and vLLM's code is named). Pure: JSON in, JSON out; each is
// defined in its protocol's file (sglang_bootstrap.cc, vllm_nixl.cc, vllm_mooncake.cc)
// beside the PdProtocol leaf that uses it; PdPair (pd_pair.h) sends them.
//
//   sglang-bootstrap  both legs: the client's body + bootstrap_host, bootstrap_port,
//                     bootstrap_room (SGLang mini_lb.py)
//   vllm-nixl         prefill: kv_transfer_params {do_remote_decode: true,
//                     do_remote_prefill: false, remote_engine_id / remote_block_ids /
//                     remote_host / remote_port: null}, stream false, max_tokens 1 (and
//                     max_completion_tokens 1 when given), no stream_options, no
//                     min_tokens / min_completion_tokens; decode: the client's body +
//                     the prefill response's kv_transfer_params, copied as they are
//                     (vLLM toy_proxy_server.py)
//   vllm-mooncake     prefill: as nixl with kv_transfer_params {do_remote_decode: true,
//                     do_remote_prefill: false, transfer_id}; decode: kv_transfer_params
//                     {do_remote_decode: false, do_remote_prefill: true,
//                     remote_bootstrap_addr: "http://" + addr, remote_engine_id,
//                     transfer_id} (vLLM mooncake_connector_proxy.py) and Infera's
//                     max_tokens − 1 (and max_completion_tokens − 1), never below 1
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace infera::pd {

nlohmann::json SglangLegBody(nlohmann::json body, std::string_view bootstrap_host,
                             uint32_t bootstrap_port, uint64_t bootstrap_room);

// The prefill-only rewrite both vLLM connectors share (vllm_nixl.cc).
nlohmann::json VllmPrefillOnly(nlohmann::json body, nlohmann::json kv_transfer_params);
nlohmann::json NixlPrefillBody(nlohmann::json body);
// FailedPrecondition when the prefill response has no kv_transfer_params object (vLLM's
// proxy would then let the decode worker recompute the prompt; Infera reports it).
absl::StatusOr<nlohmann::json> NixlDecodeBody(nlohmann::json body,
                                              const nlohmann::json& prefill_response);

// "xfer-<request id>", the transfer id form of vLLM's Mooncake proxy.
std::string MooncakeTransferId(std::string_view request_id);
nlohmann::json MooncakePrefillBody(nlohmann::json body, std::string_view transfer_id);
// `bootstrap_addr` is the prefill worker's record param "host:port".
nlohmann::json MooncakeDecodeBody(nlohmann::json body, std::string_view transfer_id,
                                  std::string_view bootstrap_addr, std::string_view engine_id);

}  // namespace infera::pd
