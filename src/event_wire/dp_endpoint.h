// The endpoints of an engine's data-parallel ranks (doc/data-parallel.md): engines
// (vLLM, SGLang, infera-mock-engine) bind rank r's KV-event sockets at rank 0's
// endpoint offset by r, and the router, infera-register and the doctor connect to the
// same addresses.
//
// Thread-safety: a pure function.
//
// Example:
//   OffsetEndpointPort("tcp://*:5557", 3);     // "tcp://*:5560"
//   OffsetEndpointPort("ipc:///tmp/kv", 1);    // "ipc:///tmp/kv_dp1"
#pragma once

#include <cstdint>
#include <string>

namespace infera::events {

// The endpoint of data-parallel rank `rank` given rank 0's: "tcp://h:5557" -> port +
// rank; "inproc://x" / "ipc://x" -> "x_dp<rank>" (as vLLM offsets its endpoints).
// Returns the endpoint unchanged for rank 0 or when it has no numeric port.
std::string OffsetEndpointPort(const std::string& endpoint, uint32_t rank);

}  // namespace infera::events
