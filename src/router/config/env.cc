// The process's sources (ConfigSources::Process) and a fixed set for tests.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>

#include "router/config/config_sources.h"

namespace infera::router::config {

ConfigSources ConfigSources::Process() {
  ConfigSources sources;
  sources.env = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  sources.random_word = [] {
    std::random_device device;
    return static_cast<uint32_t>(device());
  };
  sources.unix_ms = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
  };
  return sources;
}

ConfigSources ConfigSources::Fixed(std::map<std::string, std::string> env, uint32_t random_word,
                                   int64_t unix_ms) {
  ConfigSources sources;
  sources.env = [env = std::move(env)](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto next = std::make_shared<uint32_t>(random_word);
  sources.random_word = [next] { return (*next)++; };
  sources.unix_ms = [unix_ms] { return unix_ms; };
  return sources;
}

std::optional<std::string> ConfigSources::NonEmptyEnv(const char* name) const {
  std::optional<std::string> value = env(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

}  // namespace infera::router::config
