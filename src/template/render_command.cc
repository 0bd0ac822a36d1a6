#include "template/render_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "template/chat_template.h"
#include "tokenizer/model_path.h"
#include "tokenizer/tokenizer.h"

namespace infera::chat {

int RunRenderCommand(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 1 && std::string(args[1]) == "render") args.erase(args.begin() + 1);

  CLI::App app{"Render a chat request with the model's chat template", "infera-router render"};
  std::string tokenizer_path;
  bool tokens = false;
  std::string now_text;
  app.add_option("--router-tokenizer-path", tokenizer_path,
                 "directory with tokenizer_config.json (and tokenizer.json), or a Hugging Face "
                 "model id in the hub cache")
      ->required();
  app.add_flag("--tokens", tokens, "print the JSON array of token ids instead of the text");
  app.add_option("--now", now_text, "the time strftime_now sees (ISO-8601)");
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  std::optional<std::tm> now;
  if (!now_text.empty()) {
    absl::StatusOr<std::tm> parsed = ParseIsoTime(now_text);
    if (!parsed.ok()) {
      std::cerr << "render: " << parsed.status().message() << "\n";
      return 2;
    }
    now = *parsed;
  }
  absl::StatusOr<tokenizer::ResolvedModelPath> resolved =
      tokenizer::ResolveModelPath(tokenizer_path);
  if (!resolved.ok()) {
    std::cerr << "render: " << resolved.status().message() << "\n";
    return 2;
  }
  tokenizer_path = resolved->path;
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Load(tokenizer_path);
  if (!chat.ok()) {
    std::cerr << "render: " << chat.status().message() << "\n";
    return 1;
  }
  std::string body((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::string> prompt = chat->RenderJson(body, now);
  if (!prompt.ok()) {
    std::cerr << "render: " << prompt.status().message() << "\n";
    return 1;
  }
  if (!tokens) {
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  auto tokenizer = tokenizer::Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) {
    std::cerr << "render: " << tokenizer.status().message() << "\n";
    return 1;
  }
  std::vector<uint32_t> ids = (*tokenizer)->Encode(*prompt, /*add_special_tokens=*/false);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(ids[i]);
  }
  out += "]";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace infera::chat
