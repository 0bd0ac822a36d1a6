#include "router/admin/log_levels.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"

namespace infera::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
namespace level = spdlog::level;

LogLevels Parse(std::string_view spec, LogSyntax syntax) {
  auto l = ParseLogLevels(spec, syntax);
  EXPECT_TRUE(l.ok()) << spec << ": " << l.status();
  return l.ok() ? *l : LogLevels{};
}

TEST(LogLevelsTest, TheSpecsRustLogTurnsOnDecodeDemandDebug) {
  LogLevels l = Parse("info,infera_router::decode_demand=debug", LogSyntax::kRustLog);
  EXPECT_EQ(l.default_level, level::info);
  EXPECT_THAT(l.loggers,
              ElementsAre(Pair("decode_demand", level::debug), Pair("discovery_k8s", level::info)));
  EXPECT_EQ(l.source, "RUST_LOG");
  // Our own name works the same in both spellings.
  EXPECT_EQ(Parse("info,decode_demand=debug", LogSyntax::kFlag).loggers,
            Parse("info,infera_router::decode_demand=debug", LogSyntax::kFlag).loggers);
}

TEST(LogLevelsTest, UnsetLevelsFollowEachSyntax) {
  // --log-level keeps spdlog's default (info) for what it does not name ...
  LogLevels flag = Parse("decode_demand=debug", LogSyntax::kFlag);
  EXPECT_EQ(flag.default_level, level::info);
  // ... RUST_LOG, like EnvFilter, drops what matches no directive (errors excepted).
  LogLevels env = Parse("infera_router::decode_demand=debug", LogSyntax::kRustLog);
  EXPECT_EQ(env.default_level, level::err);
  EXPECT_THAT(env.loggers,
              ElementsAre(Pair("decode_demand", level::debug), Pair("discovery_k8s", level::err)));
  EXPECT_EQ(Parse("off", LogSyntax::kRustLog).default_level, level::off);  // asked for
}

TEST(LogLevelsTest, MoreSpecificTargetsWinWhateverTheOrder) {
  LogLevels l =
      Parse("infera_router::decode_demand=warn, infera_router=DEBUG ,error", LogSyntax::kRustLog);
  EXPECT_EQ(l.default_level, level::debug);  // the crate is the whole router
  EXPECT_THAT(l.loggers,
              ElementsAre(Pair("decode_demand", level::warn), Pair("discovery_k8s", level::debug)));
  EXPECT_EQ(Parse("3", LogSyntax::kFlag).default_level, level::info);
  EXPECT_EQ(Parse("0", LogSyntax::kFlag).default_level, level::off);
  EXPECT_EQ(Parse("warning", LogSyntax::kFlag).default_level, level::warn);
  // A bare target means every level; a later directive for the same target wins.
  EXPECT_THAT(Parse("decode_demand,info", LogSyntax::kFlag).loggers[0],
              Pair("decode_demand", level::trace));
  EXPECT_THAT(Parse("decode_demand=debug,decode_demand=error", LogSyntax::kFlag).loggers[0],
              Pair("decode_demand", level::err));
}

TEST(LogLevelsTest, ForeignCratesAreAcceptedAndReported) {
  LogLevels l = Parse("info,hyper=warn,tokio::net=off", LogSyntax::kRustLog);
  EXPECT_THAT(l.ignored, ElementsAre("hyper", "tokio::net"));
  EXPECT_EQ(l.default_level, level::info);
}

TEST(LogLevelsTest, UnknownTargetsAndBadLevelsAreErrors) {
  auto unknown = ParseLogLevels("info,decode_demnd=debug", LogSyntax::kFlag);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown log target 'decode_demnd'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("infera_router::decode_demand"));
  auto module = ParseLogLevels("infera_router::proxy=debug", LogSyntax::kRustLog);
  EXPECT_THAT(module.status().message(), HasSubstr("has no logger of its own"));
  auto bad_level = ParseLogLevels("decode_demand=loud", LogSyntax::kFlag);
  EXPECT_THAT(bad_level.status().message(), HasSubstr("'loud' is not a level"));
  EXPECT_FALSE(ParseLogLevels("verbose", LogSyntax::kFlag).ok());
  EXPECT_FALSE(ParseLogLevels("infera_router[span]=debug", LogSyntax::kRustLog).ok());
}

TEST(LogLevelsTest, FlagBeatsRustLogWhichBeatsTheDefault) {
  auto flag = ResolveLogLevels(std::string("debug"), "error");
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->default_level, level::debug);
  EXPECT_EQ(flag->source, "--log-level");
  auto env = ResolveLogLevels(std::nullopt, "error");
  EXPECT_EQ(env->default_level, level::err);
  auto none = ResolveLogLevels(std::nullopt, "");
  EXPECT_EQ(none->default_level, level::info);
  EXPECT_EQ(none->source, "default");
  EXPECT_FALSE(ResolveLogLevels(std::nullopt, "nonsense=debug").ok());
}

TEST(LogLevelsTest, ApplySetsExistingAndLaterLoggers) {
  auto sink = std::make_shared<spdlog::sinks::null_sink_mt>();
  auto early = std::make_shared<spdlog::logger>("decode_demand", sink);
  spdlog::initialize_logger(early);
  ApplyLogLevels(Parse("warn,decode_demand=debug,discovery_k8s=trace", LogSyntax::kFlag));
  EXPECT_EQ(early->level(), level::debug);
  EXPECT_EQ(spdlog::default_logger()->level(), level::warn);
  auto later = std::make_shared<spdlog::logger>("discovery_k8s", sink);
  spdlog::initialize_logger(later);
  EXPECT_EQ(later->level(), level::trace);
  spdlog::drop("decode_demand");
  spdlog::drop("discovery_k8s");
  ApplyLogLevels(Parse("info", LogSyntax::kFlag));
}

}  // namespace
}  // namespace infera::router
