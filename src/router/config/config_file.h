// `--config FILE`: the router's flags from a TOML file (doc/router.md "Configuration
// file").
//
//   # a comment
//   router-policy = "kv-aware"          # a flag's long name without "--" = its value
//   port = 8000
//   kv-overlap-weight = 1.0
//   ready-after-replay = true
//   worker = ["http://a:8000,model_name=m", "http://b:8000,model_name=m"]   # repeated
//
// CLI11 reads the file (App::set_config) through StrictTomlConfig, which parses the TOML
// this needs strictly: top-level `key = value` lines whose value is a basic or literal
// string, an integer, a float, a boolean or an array of those (arrays may span lines).
// Tables, dotted keys, inline tables, multi-line strings and dates are rejected, as is
// every key that is not one of the app's long flags, and a key set twice; each error
// names the line and the key. (CLI11 2.1's own reader accepts any line: an unquoted
// word, an unterminated string, a stray line become values or flags, and a `#` inside a
// quoted value cuts it.) Precedence: command line > file > environment > default.
//
// Thread-safety: pure; a formatter is used by one parse at a time.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace infera::router {

struct TomlSetting {
  std::string key;
  std::vector<std::string> values;  // a scalar: one value; strings unescaped
  bool array = false;
  int line = 0;  // 1-based line of the key
};

// The settings of a flat TOML document, in file order. Errors: "line N: ...".
absl::StatusOr<std::vector<TomlSetting>> ParseFlatToml(std::string_view text);

class StrictTomlConfig : public CLI::ConfigTOML {
 public:
  // REQUIRES: `app` outlives the formatter (it is the app whose keys are checked).
  explicit StrictTomlConfig(const CLI::App& app) : app_(app) {}
  // Throws CLI::ConfigError naming the line and key.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App& app_;
};

}  // namespace infera::router
