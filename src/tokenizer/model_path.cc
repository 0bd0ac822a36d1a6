#include "tokenizer/model_path.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace infera::tokenizer {
namespace {

namespace fs = std::filesystem;

const char* Env(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// os.path.expandvars: $NAME and ${NAME} with NAME set are replaced; the rest stays.
std::string ExpandVars(const std::string& s, const EnvLookup& getenv) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '$') {
      out.push_back(s[i++]);
      continue;
    }
    const bool braced = i + 1 < s.size() && s[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1), end = start;
    while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_')) {
      ++end;
    }
    const bool closed = !braced || (end < s.size() && s[end] == '}');
    const char* value =
        end > start && closed ? getenv(s.substr(start, end - start).c_str()) : nullptr;
    if (value == nullptr) {
      out.push_back(s[i++]);
      continue;
    }
    out += value;
    i = end + (braced ? 1 : 0);
  }
  return out;
}

// os.path.expanduser for "~" and "~/...": the $HOME directory.
std::string ExpandUser(const std::string& s, const EnvLookup& getenv) {
  if (s.empty() || s[0] != '~' || (s.size() > 1 && s[1] != '/')) return s;
  const char* home = Env(getenv, "HOME");
  return home == nullptr ? s : std::string(home) + s.substr(1);
}

std::string Expand(const std::string& s, const EnvLookup& getenv) {
  return ExpandVars(ExpandUser(s, getenv), getenv);
}

// huggingface_hub's validate_repo_id: `name` or `org/name`, each part of letters,
// digits, '-', '_', '.', not starting or ending with '-' or '.', at most 96
// characters for the name; no "--" or "..".
bool IsModelId(const std::string& id) {
  if (id.empty() || id.find("--") != std::string::npos || id.find("..") != std::string::npos) {
    return false;
  }
  const size_t slash = id.find('/');
  if (slash != std::string::npos && id.find('/', slash + 1) != std::string::npos) return false;
  auto part_ok = [](std::string_view p, size_t max) {
    if (p.empty() || p.size() > max) return false;
    for (char c : p) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return false;
      }
    }
    auto edge = [](char c) { return c == '-' || c == '.'; };
    return !edge(p.front()) && !edge(p.back());
  };
  if (slash == std::string::npos) return part_ok(id, 96);
  return part_ok(std::string_view(id).substr(0, slash), 96) &&
         part_ok(std::string_view(id).substr(slash + 1), 96);
}

std::string Trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

std::string HubCacheDir(const EnvLookup& getenv) {
  if (const char* v = Env(getenv, "HF_HUB_CACHE")) return Expand(v, getenv);
  if (const char* v = Env(getenv, "HUGGINGFACE_HUB_CACHE")) return Expand(v, getenv);
  std::string hf_home;
  if (const char* v = Env(getenv, "HF_HOME")) {
    hf_home = Expand(v, getenv);
  } else {
    const char* xdg = Env(getenv, "XDG_CACHE_HOME");
    hf_home = Expand(xdg != nullptr ? std::string(xdg) : std::string("~/.cache"), getenv) +
              "/huggingface";
  }
  return hf_home + "/hub";
}

absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path_or_id,
                                                   const EnvLookup& getenv) {
  std::error_code ec;
  if (fs::exists(path_or_id, ec)) return ResolvedModelPath{path_or_id, "local"};
  if (!IsModelId(path_or_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", path_or_id,
                     ": no such file or directory, and not a Hugging Face model id "
                     "(org/name)"));
  }
  const std::string cache = HubCacheDir(getenv);
  // "org/name" -> "models--org--name" (the slash becomes "--").
  const size_t slash = path_or_id.find('/');
  std::string folder =
      "models--" + (slash == std::string::npos
                        ? path_or_id
                        : path_or_id.substr(0, slash) + "--" + path_or_id.substr(slash + 1));
  const std::string repo = cache + "/" + folder;
  const std::string ref = repo + "/refs/main";
  auto not_found = [&](const std::string& what) {
    return absl::NotFoundError(absl::StrCat(
        path_or_id, ": not a local path (", fs::absolute(path_or_id, ec).string(),
        " does not exist) and not in the Hugging Face hub cache: ", what,
        ". The hub cache is $HF_HUB_CACHE, else $HF_HOME/hub, else "
        "~/.cache/huggingface/hub; the router never downloads: fetch the tokenizer with "
        "`huggingface-cli download ",
        path_or_id, " --include 'tokenizer*' 'chat_template*'` or give a directory"));
  };
  std::ifstream in(ref);
  if (!in) return not_found(absl::StrCat(ref, " does not exist"));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string commit = Trimmed(text.str());
  if (commit.empty() || commit.find('/') != std::string::npos || commit == "." || commit == "..") {
    return not_found(absl::StrCat(ref, " does not name a commit"));
  }
  const std::string snapshot = repo + "/snapshots/" + commit;
  if (!fs::is_directory(snapshot, ec)) {
    return not_found(absl::StrCat(ref, " names ", commit, " but ", snapshot, " does not exist"));
  }
  if (!fs::exists(snapshot + "/tokenizer.json", ec)) {
    return not_found(absl::StrCat(snapshot, "/tokenizer.json does not exist"));
  }
  return ResolvedModelPath{snapshot, "hub-cache"};
}

absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path_or_id) {
  return ResolveModelPath(path_or_id, [](const char* name) { return std::getenv(name); });
}

}  // namespace infera::tokenizer
