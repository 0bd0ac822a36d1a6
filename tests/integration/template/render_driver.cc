// Test driver for the template parity test.
//
//   render_driver render --router-tokenizer-path DIR ...  → infera::chat::RunRenderCommand
//     (the `infera-router render` command, until the router binary dispatches to it)
//   render_driver batch DIR NOW < requests.jsonl          → one JSON line per request:
//     {"ok": "<prompt>"} or {"error": "<message>"}; the bulk of the parity run, so a
//     few hundred conversations do not cost a few hundred process starts.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "batch") return RunBatch(argv[2], argv[3]);
  return infera::chat::RunRenderCommand(argc, argv);
}
