#include "router/config/config_file.h"

#include <gtest/gtest.h>

#include <sstream>

namespace infera::router {
namespace {

std::string ErrorOf(std::string_view text) {
  auto parsed = ParseFlatToml(text);
  return parsed.ok() ? std::string("(ok)") : std::string(parsed.status().message());
}

TEST(ConfigFileTest, ScalarsArraysAndComments) {
  auto parsed = ParseFlatToml(
      "# header\n"
      "\n"
      "host = \"127.0.0.1\"   # trailing comment\n"
      "port = 8_000\n"
      "kv-overlap-weight = -1.5e+2\n"
      "ready-after-replay = false\r\n"
      "'kv-events-topic' = 'a#b\\c'\n"
      "\"log-level\" = \"tab\\there \\\"q\\\" \\u00e9\\U0001F600\"\n"
      "worker = [\n"
      "  \"http://a:1,model_name=m\",  # first\n"
      "  \"http://b:2,model_name=m\",\n"
      "]\n"
      "threads = 0\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& s = *parsed;
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s[0].key, "host");
  EXPECT_EQ(s[0].values, std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(s[0].line, 3);
  EXPECT_EQ(s[1].values, std::vector<std::string>{"8000"});
  EXPECT_EQ(s[2].values, std::vector<std::string>{"-1.5e+2"});
  EXPECT_EQ(s[3].values, std::vector<std::string>{"false"});
  EXPECT_EQ(s[4].key, "kv-events-topic");
  EXPECT_EQ(s[4].values, std::vector<std::string>{"a#b\\c"});  // literal: no escapes, no comment
  EXPECT_EQ(s[5].values, std::vector<std::string>{"tab\there \"q\" \xc3\xa9\xf0\x9f\x98\x80"});
  EXPECT_EQ(s[6].key, "worker");
  EXPECT_TRUE(s[6].array);
  EXPECT_EQ(s[6].values,
            (std::vector<std::string>{"http://a:1,model_name=m", "http://b:2,model_name=m"}));
  EXPECT_EQ(s[7].key, "threads");
  EXPECT_EQ(s[7].line, 13);
}

TEST(ConfigFileTest, MalformedDocumentsNameTheLine) {
  EXPECT_EQ(ErrorOf("port = 1\nrouter-policy = kv-aware\n"),
            "line 2: the value of 'router-policy' is not a TOML string, number or boolean: "
            "'kv-aware' (strings are quoted: router-policy = \"kv-aware\")");
  EXPECT_EQ(ErrorOf("host = \"a\n"),
            "line 1: the value of 'host': the string is not closed with \"");
  EXPECT_EQ(ErrorOf("\n\n[router]\nport = 1\n"),
            "line 3: tables ([name]) are not used: every key is a flag's long name at the top "
            "level");
  EXPECT_EQ(ErrorOf("a.b = 1\n"), "line 1: dotted keys are not used: 'a' ends at '.'");
  EXPECT_EQ(ErrorOf("port 8000\n"), "line 1: expected '=' after the key 'port'");
  EXPECT_EQ(ErrorOf("port = 1\nport = 2\n"), "line 2: 'port' is set twice (first on line 1)");
  EXPECT_EQ(ErrorOf("port = 80 00\n"), "line 1: unexpected text after the value of 'port'");
  EXPECT_EQ(ErrorOf("port =\n"),
            "line 1: the value of 'port' is not a TOML string, number or boolean (it is empty)");
  EXPECT_EQ(ErrorOf("worker = [\"a\",\n\"b\"\n"),
            "line 3: the array of 'worker' is not closed with ']'");
  EXPECT_EQ(ErrorOf("worker = []\n"),
            "line 1: 'worker' is an empty array: leave the key out instead");
  EXPECT_EQ(ErrorOf("worker = [[\"a\"]]\n"), "line 1: 'worker': arrays inside arrays are not used");
  EXPECT_EQ(ErrorOf("x = {a = 1}\n"), "line 1: 'x': inline tables are not used");
  EXPECT_EQ(ErrorOf("x = \"\"\"a\"\"\"\n"),
            "line 1: the value of 'x': multi-line strings are not used");
  EXPECT_EQ(ErrorOf("x = \"\\q\"\n"), "line 1: the value of 'x': invalid escape \\q");
  EXPECT_EQ(ErrorOf("x = \"\\u12\"\n"), "line 1: the value of 'x': \\u needs 4 hex digits");
  EXPECT_EQ(ErrorOf("x = 1979-05-27\n").substr(0, 44),
            "line 1: the value of 'x' is not a TOML strin");
  EXPECT_NE(ErrorOf("x = 007\n"), "(ok)");
  EXPECT_NE(ErrorOf("x = 1__0\n"), "(ok)");
  EXPECT_NE(ErrorOf("x = 1.\n"), "(ok)");
  EXPECT_NE(ErrorOf("x = True\n"), "(ok)");
  EXPECT_EQ(ErrorOf("= 1\n"),
            "line 1: expected a key (a flag's long name without \"--\"), found '='");
}

TEST(ConfigFileTest, FormatterChecksKeysAgainstTheApp) {
  CLI::App app;
  int port = 0;
  std::vector<std::string> workers;
  app.add_option("--port", port);
  app.add_option("--worker", workers);
  const StrictTomlConfig config(app);
  std::istringstream good("port = 9\nworker = [\"a\", \"b\"]\n");
  const std::vector<CLI::ConfigItem> items = config.from_config(good);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].inputs, (std::vector<std::string>{"a", "b"}));
  auto error_of = [&](const std::string& text) {
    std::istringstream in(text);
    try {
      config.from_config(in);
    } catch (const CLI::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(ok)");
  };
  EXPECT_EQ(error_of("port = 9\nprot = 8\n"),
            "line 2: unknown key 'prot': infera-router has no flag --prot (`infera-router "
            "--help` lists them)");
  EXPECT_EQ(error_of("port = [1, 2]\n"), "line 1: 'port' takes one value, not an array");
  EXPECT_EQ(error_of("port = \"x\n"),
            "line 1: the value of 'port': the string is not closed with \"");
}

}  // namespace
}  // namespace infera::router
