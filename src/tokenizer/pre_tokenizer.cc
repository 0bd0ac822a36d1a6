#include "tokenizer/pre_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {
namespace {

using Range = std::pair<size_t, size_t>;
using Behavior = PreTokenizer::Behavior;

// GPT-2's pattern, used by ByteLevel with use_regex.
constexpr char kByteLevelPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::StatusOr<Behavior> ParseBehavior(const nlohmann::json& config) {
  if (!config.contains("behavior") || !config["behavior"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: 'behavior' string expected");
  }
  std::string b = config["behavior"].get<std::string>();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("pre_tokenizer: unknown behavior '", b, "'"));
}

// Turns match ranges (sorted, non-overlapping) over a text of length n into the
// kept pieces per Hugging Face's NormalizedString::split, appending [start, end)
// ranges of non-empty pieces to *out.
void ApplyBehavior(const std::vector<Range>& matches, size_t n, Behavior behavior, bool invert,
                   std::vector<Range>* out) {
  if (behavior == Behavior::kIsolated && !invert) {
    // Every gap and every match is its own piece (the common Split of byte-level
    // models): emit them directly.
    size_t prev = 0;
    for (auto [s, e] : matches) {
      if (prev != s) out->emplace_back(prev, s);
      if (s != e) out->emplace_back(s, e);
      prev = e;
    }
    if (prev != n) out->emplace_back(prev, n);
    return;
  }
  // (range, is_match) covering [0, n).
  struct Part {
    size_t s, e;
    bool m;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) parts.push_back({prev, s, false});
    parts.push_back({s, e, true});
    prev = e;
  }
  if (prev != n) parts.push_back({prev, n, false});
  if (invert) {
    for (auto& p : parts) p.m = !p.m;
  }
  // (range, remove)
  std::vector<Part> kept;
  kept.reserve(parts.size());
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& p : parts) kept.push_back({p.s, p.e, false});
      break;
    case Behavior::kRemoved:
      for (const auto& p : parts) kept.push_back({p.s, p.e, p.m});
      break;
    case Behavior::kMergedWithPrevious:
    case Behavior::kMergedWithNext:
    case Behavior::kContiguous: {
      // Hugging Face folds the parts (right to left for MergedWithNext), extending the
      // last kept piece when `join` holds for the current part.
      bool backwards = behavior == Behavior::kMergedWithNext;
      bool previous_match = false;
      for (size_t i = 0; i < parts.size(); ++i) {
        const Part& p = parts[backwards ? parts.size() - 1 - i : i];
        bool join =
            behavior == Behavior::kContiguous ? p.m == previous_match : p.m && !previous_match;
        if (join && !kept.empty()) {
          (backwards ? kept.back().s : kept.back().e) = backwards ? p.s : p.e;
        } else {
          kept.push_back({p.s, p.e, false});
        }
        previous_match = p.m;
      }
      if (backwards) std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const auto& k : kept) {
    if (!k.m && k.s != k.e) out->emplace_back(k.s, k.e);
  }
}

template <typename Pred>
void CharMatches(std::string_view text, Pred pred, std::vector<Range>* out) {
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    char32_t c = unicode::DecodeAt(text, &i);
    if (pred(c)) out->emplace_back(start, i);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& config) {
  auto p = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  absl::Status s = AddSteps(config, p.get());
  if (!s.ok()) return s;
  return p;
}

absl::Status PreTokenizer::AddSteps(const nlohmann::json& config, PreTokenizer* p) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: object with a string 'type' expected");
  }
  std::string type = config["type"].get<std::string>();
  Step step;
  if (type != "Sequence" && p->byte_level_) {
    return absl::InvalidArgumentError("pre_tokenizer: ByteLevel must be the last step");
  }
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence: 'pretokenizers' expected");
    }
    for (const auto& child : config["pretokenizers"]) {
      absl::Status s = AddSteps(child, p);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  } else if (type == "Split") {
    auto behavior = ParseBehavior(config);
    if (!behavior.ok()) return behavior.status();
    step.behavior = *behavior;
    step.invert = config.value("invert", false);
    const auto& pattern = config.contains("pattern") ? config["pattern"] : nlohmann::json();
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      std::string source = pattern["Regex"].get<std::string>();
      auto re = Regex::Compile(source);
      if (!re.ok()) return re.status();
      step.kind = Kind::kSplitRegex;
      step.regex = std::move(*re);
      step.fast = Gpt4Splitter::ForPattern(source);
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      step.kind = Kind::kSplitString;
      step.literal = pattern["String"].get<std::string>();
      if (step.literal.empty()) {
        return absl::InvalidArgumentError("pre_tokenizer Split: empty String pattern");
      }
    } else {
      return absl::InvalidArgumentError("pre_tokenizer Split: pattern String or Regex expected");
    }
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.add_prefix_space = config.value("add_prefix_space", true);
    step.use_regex = config.value("use_regex", true);
    if (step.use_regex) {
      auto re = Regex::Compile(kByteLevelPattern);
      if (!re.ok()) return re.status();
      step.regex = std::move(*re);
    }
    p->byte_level_ = true;
    // Without a prefix space or regex the step only maps bytes to characters, which
    // the byte-keyed model makes unnecessary: no step at all.
    if (!step.add_prefix_space && !step.use_regex) return absl::OkStatus();
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    step.literal = config.value("replacement", std::string("\xE2\x96\x81"));
    if (step.literal.empty() || unicode::ValidUtf8Prefix(step.literal) != step.literal.size()) {
      return absl::InvalidArgumentError("pre_tokenizer Metaspace: bad replacement");
    }
    // The replacement is one char in Hugging Face; keep its first char.
    size_t one = 0;
    unicode::DecodeAt(step.literal, &one);
    step.literal.resize(one);
    step.split = config.value("split", true);
    if (config.contains("prepend_scheme") && config["prepend_scheme"].is_string()) {
      std::string scheme = config["prepend_scheme"].get<std::string>();
      if (scheme == "always") {
        step.prepend = Prepend::kAlways;
      } else if (scheme == "first") {
        step.prepend = Prepend::kFirst;
      } else if (scheme == "never") {
        step.prepend = Prepend::kNever;
      } else {
        return absl::InvalidArgumentError("pre_tokenizer Metaspace: bad prepend_scheme");
      }
    } else {
      step.prepend = config.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    }
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    step.individual_digits = config.value("individual_digits", false);
  } else if (type == "Punctuation") {
    step.kind = Kind::kPunctuation;
    step.behavior = Behavior::kIsolated;
    if (config.contains("behavior")) {
      auto behavior = ParseBehavior(config);
      if (!behavior.ok()) return behavior.status();
      step.behavior = *behavior;
    }
  } else if (type == "Whitespace") {
    step.kind = Kind::kWhitespace;
    auto re = Regex::Compile(R"(\w+|[^\w\s]+)");
    if (!re.ok()) return re.status();
    step.regex = std::move(*re);
  } else if (type == "WhitespaceSplit") {
    step.kind = Kind::kWhitespaceSplit;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported pre_tokenizer type '", type, "'"));
  }
  p->steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::ApplyStep(const Step& step, const Word& piece, std::vector<Word>* out,
                             std::deque<std::string>* storage, std::vector<Range>* scratch) const {
  std::string_view text = piece.text;
  std::vector<Range>& matches = scratch[0];
  std::vector<Range>& kept = scratch[1];
  matches.clear();
  kept.clear();
  auto emit = [&](std::string_view base, bool at_origin) {
    for (auto [s, e] : kept) out->push_back({base.substr(s, e - s), at_origin && s == 0});
  };
  switch (step.kind) {
    case Kind::kSplitRegex:
      if (step.fast != nullptr) {
        step.fast->FindAll(text, &matches);
      } else {
        step.regex->FindAll(text, &matches);
      }
      ApplyBehavior(matches, text.size(), step.behavior, step.invert, &kept);
      emit(text, piece.at_origin);
      return;
    case Kind::kSplitString: {
      size_t pos = 0;
      while (true) {
        size_t f = text.find(step.literal, pos);
        if (f == std::string_view::npos) break;
        matches.emplace_back(f, f + step.literal.size());
        pos = f + step.literal.size();
      }
      ApplyBehavior(matches, text.size(), step.behavior, step.invert, &kept);
      emit(text, piece.at_origin);
      return;
    }
    case Kind::kByteLevel: {
      std::string_view base = text;
      if (step.add_prefix_space && (text.empty() || text[0] != ' ')) {
        // Built by append, not `" " + std::string(text)`: g++ 12 -O3 reports a false
        // -Wrestrict in operator+(const char*, string&&) (GCC bug 105329).
        std::string& spaced = storage->emplace_back(1, ' ');
        spaced.append(text);
        base = spaced;
      }
      if (!step.use_regex) {
        if (!base.empty()) out->push_back({base, piece.at_origin});
        return;
      }
      step.regex->FindAll(base, &matches);
      ApplyBehavior(matches, base.size(), Behavior::kIsolated, false, &kept);
      emit(base, piece.at_origin);
      return;
    }
    case Kind::kMetaspace: {
      std::string replaced;
      replaced.reserve(text.size() + 8);
      bool prepend = false;
      if (step.prepend == Prepend::kAlways) {
        prepend = true;
      } else if (step.prepend == Prepend::kFirst) {
        prepend = piece.at_origin;
      }
      // Prepend unless the (replaced) text already starts with the replacement.
      bool starts =
          (!text.empty() && text[0] == ' ') || text.substr(0, step.literal.size()) == step.literal;
      if (prepend && !starts) replaced.append(step.literal);
      for (char c : text) {
        if (c == ' ') {
          replaced.append(step.literal);
        } else {
          replaced.push_back(c);
        }
      }
      storage->push_back(std::move(replaced));
      std::string_view base = storage->back();
      if (!step.split) {
        if (!base.empty()) out->push_back({base, piece.at_origin});
        return;
      }
      size_t pos = 0;
      while (true) {
        size_t f = base.find(step.literal, pos);
        if (f == std::string_view::npos) break;
        matches.emplace_back(f, f + step.literal.size());
        pos = f + step.literal.size();
      }
      ApplyBehavior(matches, base.size(), Behavior::kMergedWithNext, false, &kept);
      emit(base, piece.at_origin);
      return;
    }
    case Kind::kDigits:
      CharMatches(
          text, [](char32_t c) { return c >= '0' && c <= '9'; }, &matches);
      ApplyBehavior(matches, text.size(),
                    step.individual_digits ? Behavior::kIsolated : Behavior::kContiguous, false,
                    &kept);
      emit(text, piece.at_origin);
      return;
    case Kind::kPunctuation:
      CharMatches(text, unicode::IsPunctuation, &matches);
      ApplyBehavior(matches, text.size(), step.behavior, false, &kept);
      emit(text, piece.at_origin);
      return;
    case Kind::kWhitespace:
      step.regex->FindAll(text, &matches);
      ApplyBehavior(matches, text.size(), Behavior::kRemoved, true, &kept);
      emit(text, piece.at_origin);
      return;
    case Kind::kWhitespaceSplit:
      CharMatches(text, unicode::IsWhitespace, &matches);
      ApplyBehavior(matches, text.size(), Behavior::kRemoved, false, &kept);
      emit(text, piece.at_origin);
      return;
  }
}

void PreTokenizer::PreTokenize(std::string_view text, bool at_origin, std::vector<Word>* words,
                               std::deque<std::string>* storage) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    words->push_back({text, at_origin});
    return;
  }
  // Per-thread buffers keep their capacity from call to call (PreTokenize does not
  // re-enter itself).
  thread_local std::vector<Range> scratch[2];
  thread_local std::vector<Word> current;
  thread_local std::vector<Word> next;
  // A trailing ByteLevel step without regex or prefix space passes words through
  // unchanged (the byte mapping is the model's): leave it out.
  size_t step_count = steps_.size();
  const Step& last = steps_.back();
  if (step_count > 1 && last.kind == Kind::kByteLevel && !last.use_regex &&
      !last.add_prefix_space) {
    --step_count;
  }
  current.clear();
  current.push_back({text, at_origin});
  for (size_t i = 0; i < step_count; ++i) {
    std::vector<Word>* target = i + 1 == step_count ? words : &next;
    next.clear();
    for (const Word& piece : current) ApplyStep(steps_[i], piece, target, storage, scratch);
    if (target == &next) current.swap(next);
  }
}

}  // namespace infera::tokenizer
