// KvTransferModel: how long moving a prompt's KV from a prefill to a decode worker
// takes (doc/pd.md), shared by the offline simulator and infera-mock-engine:
//   transfer_ns = tokens × kv_bytes_per_token × 8 / (kv_transfer_gbps × 1e9) s, / speedup
// Flags: --kv-transfer-gbps (default 100, one 100 Gb/s NIC) and --kv-bytes-per-token
// (default 131072 = 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes, a
// Llama-3-8B-sized model in bf16).
//
// Thread-safety: plain data.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace infera::sim {

struct KvTransferModel {
  double gbps = 100.0;
  uint64_t bytes_per_token = 131072;

  // Virtual nanoseconds to move `tokens` tokens of KV (before any --speedup).
  int64_t TransferNs(uint64_t tokens) const {
    if (gbps <= 0 || tokens == 0) return 0;
    const double bits = static_cast<double>(tokens) * static_cast<double>(bytes_per_token) * 8.0;
    return static_cast<int64_t>(bits / gbps);  // bits / (gbps × 1e9 bit/s) in ns
  }
};

inline void AddKvTransferFlags(CLI::App& app, KvTransferModel& m) {
  app.add_option("--kv-transfer-gbps", m.gbps, "PD KV transfer bandwidth, Gbit/s")
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-bytes-per-token", m.bytes_per_token, "PD KV size of one token, bytes")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
}

}  // namespace infera::sim
