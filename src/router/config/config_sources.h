// ConfigSources: what the router's configuration reads besides its flags — the
// environment, randomness and the wall clock — as one injected value, so the flag
// checks (validate.h) run in a test without the process's environment or entropy.
//
//   ConfigSources sources = ConfigSources::Process();            // main
//   ConfigSources fake = ConfigSources::Fixed({{"NATS_SERVER", "nats://n:4222"}},
//                                             /*random_word=*/7, /*unix_ms=*/1000);  // tests
//
// Thread-safety: the functions are called from the thread validating the flags only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace infera::router::config {

struct ConfigSources {
  // The variable's value ("" when set but empty); nullopt when it is not set.
  std::function<std::optional<std::string>(const char* name)> env;
  // A fresh random 32-bit word (the process: std::random_device).
  std::function<uint32_t()> random_word;
  // Wall-clock milliseconds since the Unix epoch.
  std::function<int64_t()> unix_ms;

  // The process's environment, std::random_device and std::chrono::system_clock.
  static ConfigSources Process();
  // A fixed environment, a counter from `random_word` up, a fixed clock.
  static ConfigSources Fixed(std::map<std::string, std::string> env, uint32_t random_word,
                             int64_t unix_ms);

  // env(name) when set and not empty.
  std::optional<std::string> NonEmptyEnv(const char* name) const;
};

}  // namespace infera::router::config
