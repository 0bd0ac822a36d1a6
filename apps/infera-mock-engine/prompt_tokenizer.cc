#include "prompt_tokenizer.h"

#include "template/chat_template.h"
#include "tokenizer/model_path.h"
#include "tokenizer/tokenizer.h"

namespace infera::mock {

struct PromptTokenizer::Impl {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<chat::ChatTemplate> chat;
  std::optional<core::TokenId> extra_token;  // --render-differently

  std::vector<core::TokenId> Encode(const std::string& text, bool add_special_tokens) const {
    std::vector<core::TokenId> out;
    if (tokenizer) {
      out = tokenizer->Encode(text, add_special_tokens);
    } else {
      out.reserve(text.size() + 1);
      for (unsigned char c : text) out.push_back(static_cast<core::TokenId>(c) + 1);
    }
    if (extra_token) out.push_back(*extra_token);
    return out;
  }
};

PromptTokenizer::PromptTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PromptTokenizer::~PromptTokenizer() = default;

absl::StatusOr<std::unique_ptr<PromptTokenizer>> PromptTokenizer::Load(const std::string& dir,
                                                                       bool render_differently) {
  auto impl = std::make_unique<Impl>();
  if (!dir.empty()) {
    // A directory, or a Hugging Face model id in the hub cache, as the router takes it.
    absl::StatusOr<tokenizer::ResolvedModelPath> path = tokenizer::ResolveModelPath(dir);
    if (!path.ok()) return path.status();
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
        tokenizer::Tokenizer::Load(path->path);
    if (!t.ok()) return t.status();
    impl->tokenizer = std::move(*t);
    absl::StatusOr<chat::ChatTemplate> c = chat::ChatTemplate::Load(path->path);
    if (c.ok()) impl->chat = std::move(*c);
  }
  if (render_differently) {
    const std::vector<core::TokenId> newline = impl->Encode("\n", false);
    impl->extra_token = newline.empty() ? 0 : newline.back();
  }
  return std::unique_ptr<PromptTokenizer>(new PromptTokenizer(std::move(impl)));
}

bool PromptTokenizer::has_tokenizer() const { return impl_->tokenizer != nullptr; }

std::vector<core::TokenId> PromptTokenizer::EncodeText(const std::string& text,
                                                       bool add_special_tokens) const {
  return impl_->Encode(text, add_special_tokens);
}

absl::StatusOr<std::vector<core::TokenId>> PromptTokenizer::EncodeChat(
    const nlohmann::json& body) const {
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty()) {
    return absl::InvalidArgumentError("'messages' must be a non-empty array");
  }
  if (impl_->tokenizer && impl_->chat) {
    absl::StatusOr<std::string> rendered = impl_->chat->Render(body);
    if (!rendered.ok()) return rendered.status();
    return impl_->Encode(*rendered, /*add_special_tokens=*/false);
  }
  std::string text;
  for (const nlohmann::json& m : *messages) {
    if (!m.is_object()) return absl::InvalidArgumentError("a message must be an object");
    const std::string role = m.value("role", "user");
    text += "<|" + role + "|>\n";
    auto content = m.find("content");
    if (content != m.end() && content->is_string()) {
      text += content->get<std::string>();
    } else if (content != m.end() && content->is_array()) {
      for (const nlohmann::json& part : *content) {
        if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
            part["text"].is_string()) {
          text += part["text"].get<std::string>();
        }
      }
    }
    text += "\n";
  }
  if (body.value("add_generation_prompt", true)) text += "<|assistant|>\n";
  return EncodeText(text, false);
}

std::string PromptTokenizer::TokenText(core::TokenId id) { return " t" + std::to_string(id); }

}  // namespace infera::mock
