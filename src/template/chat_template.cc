#include "template/chat_template.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"

namespace infera::chat {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::InternalError("cannot read " + path);
  return buf.str();
}

bool FileExists(const std::string& path) {
  std::ifstream in(path);
  return static_cast<bool>(in);
}

absl::StatusOr<jinja::Template> ParseTemplate(const std::string& source, const std::string& what) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    return absl::InvalidArgumentError(what + ": " + std::string(t.status().message()));
  }
  return t;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& dir) {
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base.push_back('/');
  absl::StatusOr<std::string> config = ReadFile(base + "tokenizer_config.json");
  std::optional<std::string> jinja_source;
  if (FileExists(base + "chat_template.jinja")) {
    absl::StatusOr<std::string> source = ReadFile(base + "chat_template.jinja");
    if (!source.ok()) return source.status();
    jinja_source = std::move(*source);
  }
  if (!config.ok()) {
    if (!jinja_source.has_value()) return config.status();
    return FromConfig("{}", std::move(jinja_source));
  }
  return FromConfig(*config, std::move(jinja_source));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromConfig(std::string_view config_json,
                                                      std::optional<std::string> jinja_source) {
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
  }
  ChatTemplate chat;
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "_token") != 0) continue;
    const auto& v = it.value();
    if (v.is_string()) {
      chat.special_tokens_.Set(key, jinja::Value::String(v.get<std::string>()));
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      chat.special_tokens_.Set(key, jinja::Value::String(v["content"].get<std::string>()));
    }
  }
  if (jinja_source.has_value()) {
    absl::StatusOr<jinja::Template> t = ParseTemplate(*jinja_source, "chat_template.jinja");
    if (!t.ok()) return t.status();
    chat.default_ = std::move(*t);
    return chat;
  }
  auto found = config.find("chat_template");
  if (found == config.end() || found->is_null()) {
    return absl::InvalidArgumentError("tokenizer_config.json has no chat_template");
  }
  if (found->is_string()) {
    absl::StatusOr<jinja::Template> t = ParseTemplate(found->get<std::string>(), "chat_template");
    if (!t.ok()) return t.status();
    chat.default_ = std::move(*t);
    return chat;
  }
  if (!found->is_array()) {
    return absl::InvalidArgumentError(
        "chat_template must be a string or a list of {name, template}");
  }
  for (const auto& entry : *found) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError("chat_template list entries must be {name, template}");
    }
    const std::string name = entry["name"].get<std::string>();
    if (name != "default" && name != "tool_use") continue;
    absl::StatusOr<jinja::Template> t =
        ParseTemplate(entry["template"].get<std::string>(), "chat_template '" + name + "'");
    if (!t.ok()) return t.status();
    (name == "default" ? chat.default_ : chat.tool_use_) = std::move(*t);
  }
  if (!chat.default_.has_value() && !chat.tool_use_.has_value()) {
    return absl::InvalidArgumentError("chat_template list has neither 'default' nor 'tool_use'");
  }
  return chat;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& body,
                                                 std::optional<std::tm> now) const {
  if (!body.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) {
    return absl::InvalidArgumentError("request body needs a 'messages' array");
  }
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  const jinja::Template* t = nullptr;
  if (has_tools && tool_use_.has_value()) {
    t = &*tool_use_;
  } else if (default_.has_value()) {
    t = &*default_;
  } else {
    return absl::InvalidArgumentError("no chat template for a request without tools");
  }
  jinja::Dict context = special_tokens_;
  context.Set("messages", jinja::Value::FromJson(*messages));
  context.Set("tools", has_tools ? jinja::Value::FromJson(*tools) : jinja::Value::None());
  auto documents = body.find("documents");
  context.Set("documents",
              documents != body.end() ? jinja::Value::FromJson(*documents) : jinja::Value::None());
  auto agp = body.find("add_generation_prompt");
  if (agp != body.end() && !agp->is_boolean()) {
    return absl::InvalidArgumentError("add_generation_prompt must be a boolean");
  }
  context.Set("add_generation_prompt",
              jinja::Value::Bool(agp == body.end() ? true : agp->get<bool>()));
  auto kwargs = body.find("chat_template_kwargs");
  if (kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) {
      return absl::InvalidArgumentError("chat_template_kwargs must be a JSON object");
    }
    for (auto it = kwargs->begin(); it != kwargs->end(); ++it) {
      context.Set(it.key(), jinja::Value::FromJson(it.value()));
    }
  }
  jinja::RenderOptions options;
  options.now = now;
  return t->Render(context, options);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& body,
                                                 std::optional<std::tm> now) const {
  return Render(nlohmann::ordered_json::parse(body.dump()), now);
}

absl::StatusOr<std::string> ChatTemplate::RenderJson(std::string_view body,
                                                     std::optional<std::tm> now) const {
  nlohmann::ordered_json parsed =
      nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  return Render(parsed, now);
}

absl::StatusOr<std::tm> ParseIsoTime(std::string_view text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  std::string s(text);
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%n", &year, &month, &day, &consumed) != 3) {
    return absl::InvalidArgumentError("--now must be ISO-8601 (YYYY-MM-DD[THH:MM[:SS]])");
  }
  size_t pos = static_cast<size_t>(consumed);
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == ' ')) {
    int n = 0;
    if (std::sscanf(s.c_str() + pos + 1, "%2d:%2d%n", &hour, &minute, &n) != 2) {
      return absl::InvalidArgumentError("--now: bad time of day in '" + s + "'");
    }
    pos += 1 + static_cast<size_t>(n);
    if (pos < s.size() && s[pos] == ':') {
      if (std::sscanf(s.c_str() + pos + 1, "%2d%n", &second, &n) != 1) {
        return absl::InvalidArgumentError("--now: bad seconds in '" + s + "'");
      }
      pos += 1 + static_cast<size_t>(n);
      if (pos < s.size() && s[pos] == '.') {
        ++pos;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      }
    }
  }
  if (pos < s.size()) {
    std::string zone = s.substr(pos);
    int zh = 0, zm = 0;
    if (!(zone == "Z" || std::sscanf(zone.c_str(), "+%2d:%2d", &zh, &zm) == 2 ||
          std::sscanf(zone.c_str(), "-%2d:%2d", &zh, &zm) == 2)) {
      return absl::InvalidArgumentError("--now: unexpected '" + zone + "'");
    }
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return absl::InvalidArgumentError("--now: field out of range in '" + s + "'");
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  // Normalise to fill in tm_wday / tm_yday (timegm: no time zone involved).
  std::time_t t = timegm(&tm);
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

}  // namespace infera::chat
