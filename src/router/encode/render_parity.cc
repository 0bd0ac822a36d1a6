#include "router/encode/render_parity.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace infera::router {

using nlohmann::ordered_json;

const char* RenderParityName(RenderParity parity) {
  switch (parity) {
    case RenderParity::kUnknown:
      return "unknown";
    case RenderParity::kExact:
      return "exact";
    case RenderParity::kDiverged:
      return "diverged";
    case RenderParity::kUnsupported:
      return "unsupported";
  }
  return "unknown";
}

const char* ProbeOutcomeName(ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kExact:
      return "exact";
    case ProbeOutcome::kDiverged:
      return "diverged";
    case ProbeOutcome::kUnsupported:
      return "unsupported";
    case ProbeOutcome::kError:
      return "error";
  }
  return "error";
}

RenderParity NextParity(RenderParity previous, ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kExact:
      return RenderParity::kExact;
    case ProbeOutcome::kDiverged:
      return RenderParity::kDiverged;
    case ProbeOutcome::kUnsupported:
      return RenderParity::kUnsupported;
    case ProbeOutcome::kError:
      break;
  }
  return previous;  // no answer to judge by: keep what we knew
}

ProbeShape ProbeShapeFor(std::string_view engine) {
  return engine == "sglang" ? ProbeShape::kSglangPrompt : ProbeShape::kVllmChat;
}

const std::string& ProbeMessagesJson() {
  // Ordered keys: the template may print messages with tojson.
  static const std::string* kMessages = new std::string(
      ordered_json::array(
          {{{"role", "system"}, {"content", "You are a terse assistant.  Answer in one line."}},
           {{"role", "user"},
            {"content", "Ship 3 crates to Zürich, 東京 and São Paulo by 2026-12-01?\n\nThanks!"}},
           {{"role", "assistant"}, {"content", "Yes: 3 crates, 2 days each."}},
           {{"role", "user"}, {"content", "And 12 more, tabs\tand  double  spaces? 🚢"}}})
          .dump());
  return *kMessages;
}

std::string ProbeChatBody() { return R"({"messages":)" + ProbeMessagesJson() + "}"; }

std::string ProbeRequestBody(ProbeShape shape, std::string_view model, std::string_view rendered) {
  ordered_json body = ordered_json::object();
  if (!model.empty()) body["model"] = std::string(model);
  if (shape == ProbeShape::kSglangPrompt) {
    body["prompt"] = std::string(rendered);
  } else {
    body["messages"] = ordered_json::parse(ProbeMessagesJson());
    body["add_generation_prompt"] = true;
  }
  body["add_special_tokens"] = false;
  return body.dump();
}

ProbeOutcome ClassifyProbeAnswer(int status, std::string_view body,
                                 std::span<const core::TokenId> own, std::string* detail) {
  auto say = [&](std::string text) {
    if (detail != nullptr) *detail = std::move(text);
  };
  if (status == 404 || status == 405 || status == 501) {
    say("no /tokenize (HTTP " + std::to_string(status) + ")");
    return ProbeOutcome::kUnsupported;
  }
  if (status < 200 || status > 299) {
    say("HTTP " + std::to_string(status));
    return ProbeOutcome::kError;
  }
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const auto tokens = parsed.is_object() ? parsed.find("tokens") : parsed.end();
  if (!parsed.is_object() || tokens == parsed.end() || !tokens->is_array()) {
    say("the answer has no \"tokens\" array");
    return ProbeOutcome::kError;
  }
  std::vector<core::TokenId> theirs;
  theirs.reserve(tokens->size());
  for (const nlohmann::json& t : *tokens) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() > UINT32_MAX) {
      say("a token id is not a non-negative 32-bit integer");
      return ProbeOutcome::kError;
    }
    theirs.push_back(static_cast<core::TokenId>(t.get<uint64_t>()));
  }
  const auto [mine_at, theirs_at] =
      std::mismatch(own.begin(), own.end(), theirs.begin(), theirs.end());
  if (mine_at == own.end() && theirs_at == theirs.end()) {
    say(std::to_string(own.size()) + " ids equal");
    return ProbeOutcome::kExact;
  }
  say("router " + std::to_string(own.size()) + " ids, worker " + std::to_string(theirs.size()) +
      ", first difference at position " + std::to_string(mine_at - own.begin()));
  return ProbeOutcome::kDiverged;
}

}  // namespace infera::router
