// Test driver for the template parity test.
//
//   render_driver render --router-tokenizer-path DIR ...  → infera::chat::RunRenderCommand
//     (the `infera-router render` command, until the router binary dispatches to it)
//   render_driver batch DIR NOW < requests.jsonl          → one JSON line per request:
//     {"ok": "<prompt>"} or {"error": "<message>"}; the bulk of the parity run, so a
//     few hundred conversations do not cost a few hundred process starts.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"
#include "template/render_command.h"

namespace {

int RunBatch(const std::string& dir, const std::string& now_text) {
  absl::StatusOr<infera::chat::ChatTemplate> chat = infera::chat::ChatTemplate::Load(dir);
  if (!chat.ok()) {
    std::cerr << chat.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::tm> now = infera::chat::ParseIsoTime(now_text);
  if (!now.ok()) {
    std::cerr << now.status().message() << "\n";
    return 2;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    absl::StatusOr<std::string> prompt = chat->RenderJson(line, *now);
    nlohmann::json result;
    if (prompt.ok()) {
      result["ok"] = *prompt;
    } else {
      result["error"] = std::string(prompt.status().message());
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

int RunSnippets(const std::string& now_text) {
  absl::StatusOr<std::tm> now = infera::chat::ParseIsoTime(now_text);
  if (!now.ok()) return 2;
  infera::jinja::RenderOptions options;
  options.now = *now;
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::ordered_json in = nlohmann::ordered_json::parse(line, nullptr, false);
    nlohmann::json result;
    if (in.is_discarded() || !in.contains("template") || !in["template"].is_string()) {
      result["error"] = "bad snippet line";
    } else {
      absl::StatusOr<infera::jinja::Template> t =
          infera::jinja::Template::Parse(in["template"].get<std::string>());
      infera::jinja::Dict context;
      if (in.contains("context")) context = infera::jinja::Value::FromJson(in["context"]).dict();
      absl::StatusOr<std::string> out =
          t.ok() ? t->Render(context, options) : absl::StatusOr<std::string>(t.status());
      if (out.ok()) {
        result["ok"] = *out;
      } else {
        result["error"] = std::string(out.status().message());
      }
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "batch") return RunBatch(argv[2], argv[3]);
  if (argc == 3 && std::string(argv[1]) == "snippets") return RunSnippets(argv[2]);
  return infera::chat::RunRenderCommand(argc, argv);
}
