#include "template/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "simdjson.h"

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

// vLLM's content-format detection ("openai" when the template loops over a message's
// content, else "string"), approximated on the source: a `for x in m.content` or
// `for x in m['content']` loop.
bool IteratesContent(const std::string& source) {
  static const std::regex loop(
      R"(for\s+\w+\s+in\s+\w+\s*(\.\s*content\b|\[\s*['"]content['"]\s*\]))");
  return std::regex_search(source, loop);
}

// The placeholder a "string"-format template sees for a multimodal part, by its
// OpenAI / Anthropic type; nullptr for a type that is not a medium.
const std::string* PlaceholderFor(const MultimodalPlaceholders& p, std::string_view type) {
  if (type == "image_url" || type == "image") return &p.image;
  if (type == "input_audio" || type == "audio" || type == "audio_url") return &p.audio;
  if (type == "video_url" || type == "video") return &p.video;
  return nullptr;
}

size_t CountOccurrences(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// A content list as vLLM flattens it for a "string"-format template
// (vllm/entrypoints/chat_utils.py, _get_full_multimodal_text_prompt): the text parts
// joined with a newline; each image/audio/video part contributes its modality's
// placeholder, and the placeholders the text does not already hold go first, one per
// line, in order of first appearance. nullopt when the list holds anything else (it
// then reaches the template as a list, as in vLLM).
std::optional<jinja::Value> FlattenedContent(const jinja::Value& content,
                                             const MultimodalPlaceholders& placeholders) {
  if (!content.IsList() || content.list().empty()) return std::nullopt;
  std::string text;
  bool first = true;
  std::vector<std::pair<const std::string*, size_t>> media;  // placeholder, count
  for (const jinja::Value& part : content.list()) {
    if (!part.IsDict()) return std::nullopt;
    const jinja::Value* type = part.dict().Find("type");
    if (type == nullptr || !type->IsString()) return std::nullopt;
    if (type->str() == "text") {
      const jinja::Value* t = part.dict().Find("text");
      if (t == nullptr || !t->IsString()) return std::nullopt;
      if (!first) text += '\n';
      first = false;
      text += t->str();
      continue;
    }
    const std::string* placeholder = PlaceholderFor(placeholders, type->str());
    if (placeholder == nullptr) return std::nullopt;
    auto it = std::find_if(media.begin(), media.end(),
                           [&](const auto& m) { return *m.first == *placeholder; });
    if (it == media.end()) {
      media.emplace_back(placeholder, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [placeholder, count] : media) {
    const size_t present = CountOccurrences(text, *placeholder);
    for (size_t i = present; i < count; ++i) out += *placeholder + "\n";
  }
  out += text;
  return jinja::Value::String(std::move(out));
}

// The messages with every flattenable content flattened (a copy only when one changes).
jinja::Value WithFlattenedContent(const jinja::Value& messages,
                                  const MultimodalPlaceholders& placeholders) {
  std::optional<jinja::ValueList> out;
  const jinja::ValueList& in = messages.list();
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].IsDict()) continue;
    const jinja::Value* content = in[i].dict().Find("content");
    if (content == nullptr) continue;
    std::optional<jinja::Value> flat = FlattenedContent(*content, placeholders);
    if (!flat) continue;
    if (!out) out = in;
    jinja::Dict message = in[i].dict();
    message.Set("content", std::move(*flat));
    (*out)[i] = jinja::Value::FromDict(std::move(message));
  }
  return out ? jinja::Value::List(std::move(*out)) : messages;
}

// The placeholders of a tokenizer whose added tokens are Qwen-VL's (Qwen2-VL's
// get_placeholder_str in vLLM); otherwise generic ones. Every Qwen 2.5 / 3 tokenizer
// carries the vision tokens, text-only models included.
MultimodalPlaceholders PlaceholdersOf(const nlohmann::ordered_json& config) {
  MultimodalPlaceholders p;
  auto added = config.find("added_tokens_decoder");
  if (added == config.end() || !added->is_object()) return p;
  std::vector<std::string> tokens;
  for (const auto& [id, token] : added->items()) {
    if (token.is_object() && token.contains("content") && token["content"].is_string()) {
      tokens.push_back(token["content"].get<std::string>());
    }
  }
  auto has = [&](const char* t) {
    return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
  };
  if (has("<|vision_start|>") && has("<|vision_end|>")) {
    if (has("<|image_pad|>")) p.image = "<|vision_start|><|image_pad|><|vision_end|>";
    if (has("<|video_pad|>")) p.video = "<|vision_start|><|video_pad|><|vision_end|>";
  }
  if (has("<|audio_bos|>") && has("<|AUDIO|>") && has("<|audio_eos|>")) {
    p.audio = "<|audio_bos|><|AUDIO|><|audio_eos|>";
  }
  return p;
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
  chat.placeholders_ = PlaceholdersOf(config);
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
    chat.default_openai_format_ = IteratesContent(*jinja_source);
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
    chat.default_openai_format_ = IteratesContent(found->get<std::string>());
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
    (name == "default" ? chat.default_openai_format_ : chat.tool_use_openai_format_) =
        IteratesContent(entry["template"].get<std::string>());
  }
  if (!chat.default_.has_value() && !chat.tool_use_.has_value()) {
    return absl::InvalidArgumentError("chat_template list has neither 'default' nor 'tool_use'");
  }
  return chat;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// JSON (simdjson DOM) -> template value. Objects keep the document's key order; a key
// given twice keeps its first position and its last value, as Python's json does.
// Depth is bounded by simdjson's parser (1024).
jinja::Value FromDom(const element& e) {
  switch (e.type()) {
    case element_type::NULL_VALUE:
      return jinja::Value::None();
    case element_type::BOOL:
      return jinja::Value::Bool(e.get_bool().value_unsafe());
    case element_type::INT64:
      return jinja::Value::Int(e.get_int64().value_unsafe());
    case element_type::UINT64: {
      uint64_t u = e.get_uint64().value_unsafe();
      if (u > static_cast<uint64_t>(INT64_MAX)) return jinja::Value::Float(static_cast<double>(u));
      return jinja::Value::Int(static_cast<int64_t>(u));
    }
    case element_type::DOUBLE:
      return jinja::Value::Float(e.get_double().value_unsafe());
    case element_type::STRING:
      return jinja::Value::String(std::string(e.get_string().value_unsafe()));
    case element_type::ARRAY: {
      simdjson::dom::array a = e.get_array().value_unsafe();
      jinja::ValueList items;
      items.reserve(a.size());
      for (element item : a) items.push_back(FromDom(item));
      return jinja::Value::List(std::move(items));
    }
    case element_type::OBJECT: {
      simdjson::dom::object o = e.get_object().value_unsafe();
      jinja::Dict dict;
      dict.items.reserve(o.size());
      // Repeated keys are rare; large objects get an index so this stays linear.
      constexpr size_t kLinearKeys = 16;
      std::unordered_map<std::string_view, size_t> index;
      for (const simdjson::dom::key_value_pair& f : o) {
        size_t at = dict.items.size();
        if (dict.items.size() < kLinearKeys) {
          for (size_t i = 0; i < dict.items.size(); ++i) {
            if (dict.items[i].first == f.key) at = i;
          }
        } else {
          if (index.empty()) {
            for (size_t i = 0; i < dict.items.size(); ++i) index.emplace(dict.items[i].first, i);
          }
          auto it = index.find(f.key);
          if (it != index.end()) at = it->second;
        }
        if (at < dict.items.size()) {
          dict.items[at].second = FromDom(f.value);
        } else {
          dict.items.emplace_back(std::string(f.key), FromDom(f.value));
          if (!index.empty()) index.emplace(dict.items.back().first, at);
        }
      }
      return jinja::Value::FromDict(std::move(dict));
    }
  }
  return jinja::Value::None();
}

// Nesting depth of a request body Render() accepts, as deep as simdjson's parser
// allows for RenderDom: converting and dumping a JSON value recurse once per level,
// and a body nested 50,000 levels deep overflowed the stack.
constexpr size_t kMaxRequestDepth = 1024;

// Whether `j` nests arrays/objects deeper than `limit` (iterative: no recursion).
template <class Json>
bool NestsDeeperThan(const Json& j, size_t limit) {
  std::vector<std::pair<const Json*, size_t>> stack = {{&j, 1}};
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth > limit) return true;
    for (const auto& child : *v) {
      if (child.is_structured()) stack.emplace_back(&child, depth + 1);
    }
  }
  return false;
}

absl::Status DepthError() {
  return absl::InvalidArgumentError("request body nests deeper than " +
                                    std::to_string(kMaxRequestDepth) + " levels");
}

// Bodies larger than this are parsed by a temporary parser, so one huge request does
// not pin its buffers to the thread.
constexpr size_t kKeepParserBytes = 4 << 20;

}  // namespace

absl::StatusOr<std::string> ChatTemplate::RenderBody(const jinja::Value& body,
                                                     std::optional<std::tm> now) const {
  if (!body.IsDict()) return absl::InvalidArgumentError("request body must be a JSON object");
  const jinja::Dict& b = body.dict();
  const jinja::Value* messages = b.Find("messages");
  if (messages == nullptr || !messages->IsList()) {
    return absl::InvalidArgumentError("request body needs a 'messages' array");
  }
  const jinja::Value* tools = b.Find("tools");
  const bool has_tools = tools != nullptr && !tools->IsNone();
  const jinja::Template* t = nullptr;
  bool openai_format = false;
  if (has_tools && tool_use_.has_value()) {
    t = &*tool_use_;
    openai_format = tool_use_openai_format_;
  } else if (default_.has_value()) {
    t = &*default_;
    openai_format = default_openai_format_;
  } else {
    return absl::InvalidArgumentError("no chat template for a request without tools");
  }
  jinja::Dict context = special_tokens_;
  context.Set("messages",
              openai_format ? *messages : WithFlattenedContent(*messages, placeholders_));
  context.Set("tools", has_tools ? *tools : jinja::Value::None());
  const jinja::Value* documents = b.Find("documents");
  context.Set("documents", documents != nullptr ? *documents : jinja::Value::None());
  const jinja::Value* agp = b.Find("add_generation_prompt");
  if (agp != nullptr && !agp->IsBool()) {
    return absl::InvalidArgumentError("add_generation_prompt must be a boolean");
  }
  context.Set("add_generation_prompt", jinja::Value::Bool(agp == nullptr || agp->bool_value()));
  const jinja::Value* kwargs = b.Find("chat_template_kwargs");
  if (kwargs != nullptr && !kwargs->IsNone()) {
    if (!kwargs->IsDict()) {
      return absl::InvalidArgumentError("chat_template_kwargs must be a JSON object");
    }
    for (const auto& [key, value] : kwargs->dict().items) context.Set(key, value);
  }
  jinja::RenderOptions options;
  options.now = now;
  return t->Render(context, options);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& body,
                                                 std::optional<std::tm> now) const {
  if (NestsDeeperThan(body, kMaxRequestDepth)) return DepthError();
  return RenderBody(jinja::Value::FromJson(body), now);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& body,
                                                 std::optional<std::tm> now) const {
  if (NestsDeeperThan(body, kMaxRequestDepth)) return DepthError();
  return Render(nlohmann::ordered_json::parse(body.dump()), now);
}

absl::StatusOr<std::string> ChatTemplate::RenderDom(const simdjson::dom::element& body,
                                                    std::optional<std::tm> now) const {
  return RenderBody(FromDom(body), now);
}

absl::StatusOr<std::string> ChatTemplate::RenderJson(std::string_view body,
                                                     std::optional<std::tm> now) const {
  // simdjson first (the router's hot path: a 34 KB chat parses ~10x faster than with
  // nlohmann); what it refuses (integers beyond 64 bits, nesting beyond 1024) goes
  // through nlohmann, which is also the judge of invalid JSON.
  thread_local simdjson::dom::parser shared_parser;
  std::optional<simdjson::dom::parser> own_parser;
  simdjson::dom::parser* parser = &shared_parser;
  if (body.size() > kKeepParserBytes) parser = &own_parser.emplace();
  element doc;
  if (parser->parse(body.data(), body.size()).get(doc) == simdjson::SUCCESS) {
    return RenderDom(doc, now);
  }
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
