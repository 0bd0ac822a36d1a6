#include "tokenizer/post_processor.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace infera::tokenizer {
namespace {

absl::StatusOr<uint32_t> PairId(const nlohmann::json& pair, const char* what) {
  // ["[CLS]", 101]
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_unsigned()) {
    return absl::InvalidArgumentError(absl::StrCat("post_processor: bad ", what));
  }
  return pair[1].get<uint32_t>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::FromJson(
    const nlohmann::json& config) {
  auto p = std::unique_ptr<PostProcessor>(new PostProcessor());
  absl::Status s = p->AddSteps(config);
  if (!s.ok()) return s;
  return p;
}

absl::Status PostProcessor::AddSteps(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError("post_processor: object with a string 'type' expected");
  }
  std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("processors") || !config["processors"].is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence: 'processors' expected");
    }
    for (const auto& child : config["processors"]) {
      absl::Status s = AddSteps(child);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();
  Step step;
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto cls = PairId(config.value("cls", nlohmann::json()), "cls");
    auto sep = PairId(config.value("sep", nlohmann::json()), "sep");
    if (!cls.ok()) return cls.status();
    if (!sep.ok()) return sep.status();
    step.before.push_back(*cls);
    step.after.push_back(*sep);
  } else if (type == "TemplateProcessing") {
    if (!config.contains("single") || !config["single"].is_array()) {
      return absl::InvalidArgumentError("post_processor TemplateProcessing: 'single' expected");
    }
    const nlohmann::json specials =
        config.contains("special_tokens") ? config["special_tokens"] : nlohmann::json::object();
    bool seen_sequence = false;
    for (const auto& piece : config["single"]) {
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") ||
          !piece["SpecialToken"].is_object() || !piece["SpecialToken"].contains("id") ||
          !piece["SpecialToken"]["id"].is_string()) {
        return absl::InvalidArgumentError("post_processor TemplateProcessing: bad piece");
      }
      std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (!specials.is_object() || !specials.contains(name) || !specials[name].is_object() ||
          !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor TemplateProcessing: missing special token '", name, "'"));
      }
      for (const auto& id : specials[name]["ids"]) {
        if (!id.is_number_unsigned()) {
          return absl::InvalidArgumentError("post_processor TemplateProcessing: bad id");
        }
        (seen_sequence ? step.after : step.before).push_back(id.get<uint32_t>());
      }
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unsupported post_processor type '", type, "'"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

std::vector<uint32_t> PostProcessor::Process(std::vector<uint32_t> ids) const {
  for (const Step& step : steps_) {
    if (step.before.empty() && step.after.empty()) continue;
    std::vector<uint32_t> out;
    out.reserve(ids.size() + step.before.size() + step.after.size());
    out.insert(out.end(), step.before.begin(), step.before.end());
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), step.after.begin(), step.after.end());
    ids = std::move(out);
  }
  return ids;
}

}  // namespace infera::tokenizer
