#include "tokenizer/model_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace infera::tokenizer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ModelPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("model_path_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  EnvLookup Env() const {
    return [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
  }
  // A hub-cache snapshot of `id` at commit `sha` holding tokenizer.json.
  std::string MakeSnapshot(const fs::path& cache, const std::string& folder, const std::string& sha,
                           bool with_tokenizer = true) {
    fs::path repo = cache / folder;
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "snapshots" / sha);
    std::ofstream(repo / "refs" / "main") << sha;  // huggingface_hub writes no newline
    if (with_tokenizer) std::ofstream(repo / "snapshots" / sha / "tokenizer.json") << "{}";
    return (repo / "snapshots" / sha).string();
  }

  fs::path root_;
  std::map<std::string, std::string> env_;
};

TEST_F(ModelPathTest, LocalPathsWinAndAreKeptAsGiven) {
  fs::create_directories(root_ / "dir");
  auto p = ResolveModelPath((root_ / "dir").string(), Env());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->path, (root_ / "dir").string());
  EXPECT_EQ(p->source, "local");
}

TEST_F(ModelPathTest, HubCacheOrderOfEnvironmentVariables) {
  env_["HOME"] = "/home/u";
  EXPECT_EQ(HubCacheDir(Env()), "/home/u/.cache/huggingface/hub");
  env_["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(HubCacheDir(Env()), "/xdg/huggingface/hub");
  env_["HF_HOME"] = "~/hf";
  EXPECT_EQ(HubCacheDir(Env()), "/home/u/hf/hub");
  env_["HUGGINGFACE_HUB_CACHE"] = "/legacy";
  EXPECT_EQ(HubCacheDir(Env()), "/legacy");
  env_["HF_HUB_CACHE"] = "${HOME}/c/$NOPE";
  EXPECT_EQ(HubCacheDir(Env()), "/home/u/c/$NOPE");  // unset variables stay, as in Python
  env_["HF_HUB_CACHE"] = "";                         // empty counts as unset
  EXPECT_EQ(HubCacheDir(Env()), "/legacy");
}

TEST_F(ModelPathTest, ModelIdResolvesThroughRefsMain) {
  env_["HF_HOME"] = root_.string();
  const std::string snap = MakeSnapshot(root_ / "hub", "models--Qwen--Qwen3-0.6B", "abc123");
  MakeSnapshot(root_ / "hub", "models--gpt2", "def456");
  auto p = ResolveModelPath("Qwen/Qwen3-0.6B", Env());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->path, snap);
  EXPECT_EQ(p->source, "hub-cache");
  auto no_org = ResolveModelPath("gpt2", Env());
  ASSERT_TRUE(no_org.ok()) << no_org.status();
  EXPECT_THAT(no_org->path, HasSubstr("models--gpt2/snapshots/def456"));
  env_["HF_HUB_CACHE"] = (root_ / "elsewhere").string();
  auto moved = ResolveModelPath("Qwen/Qwen3-0.6B", Env());
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelPathTest, MissingPiecesNameThePathsTried) {
  env_["HF_HUB_CACHE"] = root_.string();
  auto absent = ResolveModelPath("Qwen/Qwen3-0.6B", Env());
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(absent.status().message(),
              HasSubstr(root_.string() + "/models--Qwen--Qwen3-0.6B/refs/main does not exist"));
  EXPECT_THAT(absent.status().message(), HasSubstr("never downloads"));

  fs::create_directories(root_ / "models--Qwen--Qwen3-0.6B" / "refs");
  std::ofstream(root_ / "models--Qwen--Qwen3-0.6B" / "refs" / "main") << "feed\n";
  auto no_snapshot = ResolveModelPath("Qwen/Qwen3-0.6B", Env());
  EXPECT_THAT(no_snapshot.status().message(), HasSubstr("snapshots/feed does not exist"));

  MakeSnapshot(root_, "models--Qwen--Qwen3-0.6B", "feed", /*with_tokenizer=*/false);
  auto no_tokenizer = ResolveModelPath("Qwen/Qwen3-0.6B", Env());
  EXPECT_THAT(no_tokenizer.status().message(), HasSubstr("snapshots/feed/tokenizer.json"));
}

TEST_F(ModelPathTest, TextThatIsNeitherPathNorIdIsRefused) {
  env_["HF_HUB_CACHE"] = root_.string();
  for (const char* bad : {"", "a/b/c", "a--b/c", "a/..", "/abs/missing", "org/-x",
                          "Qwen/Qwen3-0.6B@main", "with space/x"}) {
    auto p = ResolveModelPath(bad, Env());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace infera::tokenizer
