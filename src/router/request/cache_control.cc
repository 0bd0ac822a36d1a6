#include "router/request/cache_control.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

namespace infera::router {
namespace {

using simdjson::dom::element;

std::optional<element> HintField(const element& obj, std::string_view key) {
  element v;
  if (obj.is_object() && obj.at_key(key).get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}

std::optional<std::string_view> HintString(const std::optional<element>& v) {
  std::string_view s;
  if (!v || v->get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

// Trimmed and lower-cased, as Infera compares retention values.
std::optional<std::string> HintLower(const std::optional<element>& v) {
  std::optional<std::string_view> s = HintString(v);
  if (!s) return std::nullopt;
  std::string_view t = *s;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  std::string out(t);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The retention one block with a cache_control key asks for, if any.
std::optional<Retention> BlockHint(const element& block) {
  const std::optional<std::string_view> type = HintString(HintField(block, "type"));
  if (type == "thinking" || type == "redacted_thinking") return Retention::kNone;
  auto cc = HintField(block, "cache_control");
  if (!cc || !cc->is_object() || HintString(HintField(*cc, "type")) != "ephemeral")
    return std::nullopt;
  const std::optional<std::string> ttl = HintLower(HintField(*cc, "ttl"));
  if (ttl == "1h" || ttl == "1hr" || ttl == "60m" || ttl == "3600s" || ttl == "long") {
    return Retention::kLong;
  }
  return Retention::kShort;  // 5m, another ttl or none: Anthropic's default
}

void ScanHintBlocks(const std::optional<element>& list, std::optional<Retention>& best) {
  if (!list || !list->is_array()) return;
  simdjson::dom::array blocks;
  if (list->get_array().get(blocks) != simdjson::SUCCESS) return;
  for (element block : blocks) {
    if (!HintField(block, "cache_control")) continue;
    if (std::optional<Retention> r = BlockHint(block)) best = std::max(best.value_or(*r), *r);
  }
}

}  // namespace

const char* RetentionName(Retention r) {
  switch (r) {
    case Retention::kNone:
      return "none";
    case Retention::kShort:
      return "short";
    case Retention::kLong:
      return "long";
  }
  return "none";
}

CacheRetention ParseCacheRetention(const element& body) {
  std::optional<Retention> openai;
  if (std::optional<std::string> r = HintLower(HintField(body, "prompt_cache_retention"))) {
    if (*r == "24h" || *r == "1h" || *r == "long") openai = Retention::kLong;
    if (*r == "5m" || *r == "short") openai = Retention::kShort;
    if (*r == "none" || *r == "off" || *r == "disabled") openai = Retention::kNone;
  } else if (auto key = HintField(body, "prompt_cache_key"); key && !key->is_null()) {
    openai = Retention::kShort;
  }
  std::optional<Retention> anthropic;
  ScanHintBlocks(HintField(body, "system"), anthropic);
  ScanHintBlocks(HintField(body, "tools"), anthropic);
  simdjson::dom::array messages;
  if (auto list = HintField(body, "messages");
      list && list->get_array().get(messages) == simdjson::SUCCESS) {
    for (element m : messages) ScanHintBlocks(HintField(m, "content"), anthropic);
  }
  CacheRetention out;
  out.explicit_hint = openai.has_value() || anthropic.has_value();
  out.retention = std::max(openai.value_or(Retention::kNone), anthropic.value_or(Retention::kNone));
  return out;
}

double RetentionWeightFactor(const CacheRetention& hints) {
  if (hints.retention == Retention::kLong) return kLongRetentionFactor;
  if (hints.retention == Retention::kNone && hints.explicit_hint) return kNoneRetentionFactor;
  return 1.0;
}

}  // namespace infera::router
