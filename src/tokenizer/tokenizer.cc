#include "tokenizer/tokenizer.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace infera::tokenizer {

// The loaded pipeline. Immutable after FromJson (the model's word cache is
// internally synchronised).
class TokenizerImpl {
 public:
  static absl::StatusOr<std::unique_ptr<TokenizerImpl>> FromJson(
      const nlohmann::json& root, const StreamedVocab* streamed = nullptr);

  void EncodeAppend(std::string_view input, std::vector<uint32_t>* out) const;
  std::vector<uint32_t> PostProcess(std::vector<uint32_t> ids) const {
    return post_ == nullptr ? std::move(ids) : post_->Process(std::move(ids));
  }
  void SafeBoundaries(std::string_view text, std::vector<size_t>* out) const {
    if (unicode::ValidUtf8Prefix(text) != text.size()) return;
    added_->SafeBoundaries(text, out);
  }
  size_t SafeBoundaryReach(std::string_view text, size_t q) const {
    return added_->SafeBoundaryReach(text, q);
  }
  std::optional<uint32_t> TokenToId(std::string_view token) const {
    if (auto id = added_->TokenToId(token)) return id;
    return model_->TokenToId(token);
  }
  std::optional<std::string> IdToToken(uint32_t id) const {
    if (auto t = added_->IdToToken(id)) return t;
    return model_->IdToToken(id);
  }
  size_t vocab_size() const {
    size_t n = model_->vocab_size();
    for (const auto& t : added_->tokens()) n = std::max<size_t>(n, t.id + 1);
    return n;
  }

 private:
  void EncodePiece(std::string_view piece, bool at_origin, std::vector<uint32_t>* out) const;
  void EncodeWords(std::string_view text, bool at_origin, std::vector<uint32_t>* out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_;
  std::unique_ptr<AddedVocabulary> added_;
};

absl::StatusOr<std::unique_ptr<TokenizerImpl>> TokenizerImpl::FromJson(
    const nlohmann::json& root, const StreamedVocab* streamed) {
  if (!root.is_object()) return absl::InvalidArgumentError("tokenizer.json: object expected");
  auto impl = std::make_unique<TokenizerImpl>();
  if (root.contains("normalizer") && !root["normalizer"].is_null()) {
    auto n = Normalizer::FromJson(root["normalizer"]);
    if (!n.ok()) return n.status();
    impl->normalizer_ = std::move(*n);
  }
  bool byte_level = false;
  if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) {
    auto p = PreTokenizer::FromJson(root["pre_tokenizer"]);
    if (!p.ok()) return p.status();
    impl->pre_ = std::move(*p);
    byte_level = impl->pre_->byte_level();
  }
  if (!root.contains("model")) return absl::InvalidArgumentError("tokenizer.json: no 'model'");
  auto m = BpeModel::FromJson(root["model"], byte_level, streamed);
  if (!m.ok()) return m.status();
  impl->model_ = std::move(*m);
  if (root.contains("post_processor") && !root["post_processor"].is_null()) {
    auto p = PostProcessor::FromJson(root["post_processor"]);
    if (!p.ok()) return p.status();
    impl->post_ = std::move(*p);
  }
  std::vector<AddedVocabulary::Token> tokens;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array()) {
      return absl::InvalidArgumentError("tokenizer.json: 'added_tokens' array expected");
    }
    for (const auto& a : root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() ||
          !a.contains("content") || !a["content"].is_string()) {
        return absl::InvalidArgumentError("tokenizer.json: bad added token");
      }
      AddedVocabulary::Token t;
      t.id = a["id"].get<uint32_t>();
      t.content = a["content"].get<std::string>();
      if (t.content.empty()) continue;
      if (unicode::ValidUtf8Prefix(t.content) != t.content.size()) {
        return absl::InvalidArgumentError("tokenizer.json: added token is not UTF-8");
      }
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      tokens.push_back(std::move(t));
    }
  }
  const Normalizer* normalizer = impl->normalizer_.get();
  impl->added_ =
      std::make_unique<AddedVocabulary>(std::move(tokens), [normalizer](std::string_view content) {
        std::string out;
        if (normalizer == nullptr) return std::string(content);
        normalizer->Normalize(content, &out);
        return out;
      });
  return impl;
}

void TokenizerImpl::EncodeWords(std::string_view text, bool at_origin,
                                std::vector<uint32_t>* out) const {
  if (text.empty()) return;
  if (pre_ == nullptr) {
    model_->Tokenize(text, out);
    return;
  }
  thread_local std::vector<PreTokenizer::Word> words;
  std::deque<std::string> storage;
  size_t base = words.size();  // re-entrancy safe: only our own range is used
  pre_->PreTokenize(text, at_origin, &words, &storage);
  for (size_t i = base; i < words.size(); ++i) model_->Tokenize(words[i].text, out);
  words.resize(base);
}

void TokenizerImpl::EncodePiece(std::string_view piece, bool at_origin,
                                std::vector<uint32_t>* out) const {
  std::string normalized_buf;
  std::string_view normalized = piece;
  if (normalizer_ != nullptr) {
    normalizer_->Normalize(piece, &normalized_buf);
    normalized = normalized_buf;
  }
  if (!added_->has_normalized()) {
    EncodeWords(normalized, at_origin, out);
    return;
  }
  std::vector<AddedVocabulary::Split> splits;
  added_->SplitText(normalized, /*normalized_pass=*/true, &splits);
  for (const auto& s : splits) {
    if (s.token_index >= 0) {
      out->push_back(added_->tokens()[static_cast<size_t>(s.token_index)].id);
    } else {
      EncodeWords(normalized.substr(s.start, s.end - s.start), at_origin && s.start == 0, out);
    }
  }
}

void TokenizerImpl::EncodeAppend(std::string_view input, std::vector<uint32_t>* out) const {
  std::string repaired;
  std::string_view text = input;
  if (unicode::ValidUtf8Prefix(input) != input.size()) {
    unicode::AppendRepairedUtf8(input, &repaired);
    text = repaired;
  }
  std::vector<AddedVocabulary::Split> splits;
  added_->SplitText(text, /*normalized_pass=*/false, &splits);
  for (const auto& s : splits) {
    if (s.token_index >= 0) {
      out->push_back(added_->tokens()[static_cast<size_t>(s.token_index)].id);
    } else {
      EncodePiece(text.substr(s.start, s.end - s.start), s.start == 0, out);
    }
  }
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec)) p /= "tokenizer.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", p.string()));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (!in.good() && !in.eof()) return absl::InternalError(absl::StrCat("cannot read ", p.string()));
  auto t = FromJson(buf.str());
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(p.string(), ": ", t.status().message()));
  }
  return t;
}

namespace {

// Parses tokenizer.json into a JSON document, except model.vocab and model.merges (most
// of the file: hundreds of thousands of entries), which are read straight into a
// StreamedVocab and left in the document as empty placeholders. Building them as
// document nodes (a sorted std::map of the vocab, one node per merge) was most of the
// load time.
class StreamingLoader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  StreamingLoader(nlohmann::json* root, StreamedVocab* streamed)
      : dom_(*root, /*allow_exceptions=*/false), streamed_(streamed) {}

  bool null() override {
    if (capture_ != Capture::kNone) return Scalar("null");
    return dom_.null();
  }
  bool boolean(bool b) override {
    if (capture_ != Capture::kNone) return Scalar("a boolean");
    return dom_.boolean(b);
  }
  bool number_integer(number_integer_t n) override {
    if (capture_ != Capture::kNone) return Scalar("a negative number");
    return dom_.number_integer(n);
  }
  bool number_unsigned(number_unsigned_t n) override {
    if (capture_ == Capture::kVocab && depth_ == 1) {
      streamed_->vocab.emplace_back(std::move(key_), n);
      return true;
    }
    if (capture_ != Capture::kNone) return Scalar("a number");
    return dom_.number_unsigned(n);
  }
  bool number_float(number_float_t f, const string_t& s) override {
    if (capture_ != Capture::kNone) return Scalar("a number");
    return dom_.number_float(f, s);
  }
  bool string(string_t& s) override {
    if (capture_ == Capture::kMerges && depth_ == 1) {
      streamed_->merges.push_back({std::move(s), {}, true});
      return true;
    }
    if (capture_ == Capture::kMerges && depth_ == 2) {
      pair_.push_back(std::move(s));
      return true;
    }
    if (capture_ != Capture::kNone) return Scalar("a string");
    return dom_.string(s);
  }
  bool binary(binary_t& b) override {
    if (capture_ != Capture::kNone) return Scalar("binary");
    return dom_.binary(b);
  }
  bool start_object(std::size_t n) override {
    if (capture_ != Capture::kNone) {
      ++depth_;
      return Scalar("an object");
    }
    if (AtModelKey("vocab")) {
      streamed_->has_vocab = true;
      streamed_->vocab.clear();
      Begin(Capture::kVocab);
      return dom_.start_object(0);
    }
    path_.push_back({true, {}});
    return dom_.start_object(n);
  }
  bool key(string_t& k) override {
    if (capture_ != Capture::kNone) {
      if (capture_ == Capture::kVocab && depth_ == 1) key_ = std::move(k);
      return true;
    }
    path_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() override {
    if (capture_ != Capture::kNone) return End();
    path_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    if (capture_ != Capture::kNone) {
      ++depth_;
      if (capture_ == Capture::kMerges && depth_ == 2) {
        pair_.clear();
        return true;
      }
      return Scalar("an array");
    }
    if (AtModelKey("merges")) {
      streamed_->has_merges = true;
      streamed_->merges.clear();
      Begin(Capture::kMerges);
      return dom_.start_array(0);
    }
    path_.push_back({false, {}});
    return dom_.start_array(n);
  }
  bool end_array() override {
    if (capture_ == Capture::kMerges && depth_ == 2) {
      if (pair_.size() == 2) {
        streamed_->merges.push_back({std::move(pair_[0]), std::move(pair_[1]), false});
      } else {
        Fail("merge must be \"a b\" or [\"a\", \"b\"]");
      }
    }
    if (capture_ != Capture::kNone) return End();
    path_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    return dom_.parse_error(position, last_token, e);
  }

 private:
  enum class Capture { kNone, kVocab, kMerges };
  struct Level {
    bool is_object;
    std::string key;  // the current key (objects)
  };

  // The value about to start is root.model.<key>.
  bool AtModelKey(std::string_view key) const {
    return path_.size() == 2 && path_[0].is_object && path_[0].key == "model" &&
           path_[1].is_object && path_[1].key == key;
  }
  void Begin(Capture capture) {
    capture_ = capture;
    depth_ = 1;
  }
  // Leaves one nesting level of the captured value; at its end, closes the placeholder.
  bool End() {
    if (--depth_ > 0) return true;
    Capture done = capture_;
    capture_ = Capture::kNone;
    return done == Capture::kVocab ? dom_.end_object() : dom_.end_array();
  }
  // A value the captured vocab/merges cannot hold.
  bool Scalar(const char* what) {
    if (capture_ == Capture::kVocab) {
      Fail(depth_ <= 2 ? "bad id for token '" + key_ + "'" : std::string("bad vocab"));
    } else if (!(depth_ == 2 && std::string_view(what) == "a string")) {
      Fail("merge must be \"a b\" or [\"a\", \"b\"]");
    }
    return true;
  }
  void Fail(std::string message) {
    if (streamed_->error.empty()) streamed_->error = std::move(message);
  }

  nlohmann::detail::json_sax_dom_parser<nlohmann::json> dom_;
  StreamedVocab* streamed_;
  std::vector<Level> path_;
  Capture capture_ = Capture::kNone;
  int depth_ = 0;  // nesting inside the captured value (1 = its own level)
  std::string key_;
  std::vector<std::string> pair_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json) {
  nlohmann::json root;
  StreamedVocab streamed;
  StreamingLoader loader(&root, &streamed);
  bool parsed = nlohmann::json::sax_parse(tokenizer_json.begin(), tokenizer_json.end(), &loader,
                                          nlohmann::json::input_format_t::json,
                                          /*strict=*/true);
  if (!parsed || root.is_discarded()) {
    return absl::InvalidArgumentError("tokenizer.json: invalid JSON");
  }
  try {
    auto impl = TokenizerImpl::FromJson(root, &streamed);
    if (!impl.ok()) return impl.status();
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(*impl)));
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong JSON type reached a typed accessor.
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

std::vector<uint32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->EncodeAppend(text, &ids);
  if (add_special_tokens) return impl_->PostProcess(std::move(ids));
  return ids;
}

void Tokenizer::EncodeAppend(std::string_view text, std::vector<uint32_t>* out) const {
  impl_->EncodeAppend(text, out);
}

std::vector<size_t> Tokenizer::SafeBoundaries(std::string_view text) const {
  std::vector<size_t> out;
  impl_->SafeBoundaries(text, &out);
  return out;
}

size_t Tokenizer::SafeBoundaryReach(std::string_view text, size_t q) const {
  return impl_->SafeBoundaryReach(text, q);
}

std::optional<uint32_t> Tokenizer::TokenToId(std::string_view token) const {
  return impl_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(uint32_t id) const { return impl_->IdToToken(id); }

size_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }

}  // namespace infera::tokenizer
