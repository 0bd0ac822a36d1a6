#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

// True when `text` is certainly already in NFC: every character is NFC_QC=Yes with
// combining class 0 and no two adjacent characters compose (below U+0300, CJK
// unified ideographs, Hangul syllables, kana without the combining voicing marks).
bool SurelyNfc(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    char32_t cp = unicode::DecodeAt(text, &i);
    bool ok = cp < 0x300 || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
              (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
              (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF01 && cp <= 0xFF5E);
    if (!ok) return false;
  }
  return true;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

void Utf8procMap(std::string_view in, int options, std::string* out) {
  if (in.empty()) {
    out->clear();
    return;
  }
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                    static_cast<utf8proc_ssize_t>(in.size()), &result,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only on invalid UTF-8, which callers exclude; keep the text unchanged.
    out->assign(in);
    return;
  }
  out->assign(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const nlohmann::json& config) {
  auto n = std::unique_ptr<Normalizer>(new Normalizer());
  absl::Status s = AddSteps(config, n.get());
  if (!s.ok()) return s;
  return n;
}

absl::Status Normalizer::AddSteps(const nlohmann::json& config, Normalizer* n) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: object with a string 'type' expected");
  }
  std::string type = config["type"].get<std::string>();
  Step step;
  if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence: 'normalizers' array expected");
    }
    for (const auto& child : config["normalizers"]) {
      absl::Status s = AddSteps(child, n);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    if (!config.contains("prepend") || !config["prepend"].is_string()) {
      return absl::InvalidArgumentError("normalizer Prepend: 'prepend' string expected");
    }
    step.content = config["prepend"].get<std::string>();
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.strip_left = config.value("strip_left", true);
    step.strip_right = config.value("strip_right", true);
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    if (!config.contains("content") || !config["content"].is_string() ||
        !config.contains("pattern") || !config["pattern"].is_object()) {
      return absl::InvalidArgumentError("normalizer Replace: 'pattern' and 'content' expected");
    }
    step.content = config["content"].get<std::string>();
    const auto& p = config["pattern"];
    if (p.contains("String") && p["String"].is_string()) {
      step.pattern = p["String"].get<std::string>();
      if (step.pattern.empty()) {
        return absl::InvalidArgumentError("normalizer Replace: empty pattern");
      }
    } else if (p.contains("Regex") && p["Regex"].is_string()) {
      auto re = Regex::Compile(p["Regex"].get<std::string>());
      if (!re.ok()) return re.status();
      step.regex = std::move(*re);
    } else {
      return absl::InvalidArgumentError("normalizer Replace: pattern String or Regex expected");
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported normalizer type '", type, "'"));
  }
  n->steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void Normalizer::Apply(const Step& step, std::string_view in, std::string* out) {
  out->clear();
  switch (step.kind) {
    case Kind::kNfc:
      if (SurelyNfc(in)) {
        out->assign(in);
      } else {
        Utf8procMap(in, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
      }
      return;
    case Kind::kNfd:
    case Kind::kNfkc:
    case Kind::kNfkd: {
      int options = UTF8PROC_STABLE;
      options |= step.kind == Kind::kNfkc ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
      if (step.kind != Kind::kNfd) options |= UTF8PROC_COMPAT;
      if (IsAscii(in)) {
        out->assign(in);
      } else {
        Utf8procMap(in, options, out);
      }
      return;
    }
    case Kind::kLowercase: {
      size_t i = 0;
      while (i < in.size()) {
        char32_t c = unicode::DecodeAt(in, &i);
        if (c < 0x80) {
          out->push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
        } else if (c == 0x130) {
          // Rust's to_lowercase: İ -> i + COMBINING DOT ABOVE.
          out->append("i\xCC\x87");
        } else {
          unicode::AppendUtf8(
              static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), out);
        }
      }
      return;
    }
    case Kind::kPrepend:
      if (!in.empty()) out->append(step.content);
      out->append(in);
      return;
    case Kind::kStrip: {
      size_t begin = 0, end = in.size();
      if (step.strip_left) {
        while (begin < end) {
          size_t j = begin;
          if (!unicode::IsWhitespace(unicode::DecodeAt(in, &j))) break;
          begin = j;
        }
      }
      if (step.strip_right) {
        while (end > begin) {
          size_t k = begin + unicode::LastCharStart(in.substr(begin, end - begin));
          size_t j = k;
          if (!unicode::IsWhitespace(unicode::DecodeAt(in, &j))) break;
          end = k;
        }
      }
      out->assign(in.substr(begin, end - begin));
      return;
    }
    case Kind::kReplace: {
      if (step.regex != nullptr) {
        std::vector<std::pair<size_t, size_t>> matches;
        step.regex->FindAll(in, &matches);
        size_t prev = 0;
        for (auto [s, e] : matches) {
          out->append(in.substr(prev, s - prev));
          out->append(step.content);
          prev = e;
        }
        out->append(in.substr(prev));
      } else {
        size_t prev = 0;
        while (true) {
          size_t p = in.find(step.pattern, prev);
          if (p == std::string_view::npos) break;
          out->append(in.substr(prev, p - prev));
          out->append(step.content);
          prev = p + step.pattern.size();
        }
        out->append(in.substr(prev));
      }
      return;
    }
  }
}

void Normalizer::Normalize(std::string_view text, std::string* out) const {
  if (steps_.empty()) {
    out->assign(text);
    return;
  }
  Apply(steps_[0], text, out);
  std::string tmp;
  for (size_t i = 1; i < steps_.size(); ++i) {
    tmp.swap(*out);
    Apply(steps_[i], tmp, out);
  }
}

}  // namespace infera::tokenizer
