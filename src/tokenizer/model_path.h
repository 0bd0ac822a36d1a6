// ResolveModelPath: turns `--router-tokenizer-path` (a directory, a tokenizer.json
// file, or a Hugging Face model id such as "Qwen/Qwen3-0.6B") into a local path,
// offline, through the Hugging Face hub cache exactly as `huggingface_hub` lays it out
// (doc/tokenizer.md "Model ids and the hub cache"). Nothing is ever downloaded.
//
//   absl::StatusOr<ResolvedModelPath> p = ResolveModelPath("Qwen/Qwen3-0.6B");
//   // p->path == "/root/.cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/<sha>"
//   auto t = Tokenizer::Load(p->path);
//
// Rules, in order:
//   1. An existing file or directory is used as it is (Infera's
//      infera/common/tokenizer.py checks the local path first too).
//   2. Otherwise the text must be a model id (`name` or `org/name`, the characters
//      huggingface_hub accepts: letters, digits, `-`, `_`, `.`; no `--` or `..`). The
//      hub cache is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
//      else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (a leading
//      `~` is the $HOME directory). The snapshot is
//      `<cache>/models--<org>--<name>/snapshots/<commit>` where <commit> is the
//      content of `refs/main`, as huggingface_hub's try_to_load_from_cache reads it.
//      There is no revision suffix: Infera resolves ids with snapshot_download's
//      default revision (main), and so does this.
//   3. The snapshot must hold tokenizer.json.
// Every failure is NotFound (InvalidArgument for text that is neither a path nor a
// model id) and names each path it tried.
//
// Thread-safety: a pure function of its inputs and the file system.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace infera::tokenizer {

struct ResolvedModelPath {
  std::string path;  // a directory or a tokenizer.json file
  // "local" (rule 1) or "hub-cache" (rule 2).
  std::string source;
};

// `getenv` reads the environment (tests inject one); nullptr means unset.
using EnvLookup = std::function<const char*(const char*)>;

absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path_or_id,
                                                   const EnvLookup& getenv);
// Same, with the process environment.
absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path_or_id);

// The hub cache directory huggingface_hub would use (rule 2).
std::string HubCacheDir(const EnvLookup& getenv);

}  // namespace infera::tokenizer
