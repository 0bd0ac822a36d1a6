// The Kubernetes API objects Kubernetes discovery reads and writes (doc/discovery.md
// §3), parsed at the boundary: a Pod list, one watch event, a Status, the annotation
// merge patch. Only the fields discovery uses are kept.
//
//   auto list = ParsePodList(body);        // GET /api/v1/namespaces/NS/pods?labelSelector=S
//   auto event = ParseWatchEvent(line);    // one line of ...&watch=true
//   std::string patch = AnnotationMergePatch(kWorkerInfoAnnotation, record_json);
//
// Pure; thread-safe. Malformed input is InvalidArgument naming what is wrong.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace infera::discovery {

// The Pod annotation Infera's workers write their record into
// (infera/common/discovery_k8s.py WORKER_INFO_ANNOTATION).
inline constexpr char kWorkerInfoAnnotation[] = "infera.amd.com/worker-info";

struct KubePod {
  std::string name;
  std::string resource_version;
  std::string phase;                       // status.phase ("" when absent)
  bool terminating = false;                // metadata.deletionTimestamp is set
  std::optional<std::string> worker_info;  // the kWorkerInfoAnnotation value

  // A routing candidate: Running, not being deleted, annotated (as Infera decides it).
  bool Routable() const { return phase == "Running" && !terminating && worker_info.has_value(); }
};

struct KubePodList {
  std::string resource_version;  // metadata.resourceVersion of the list
  std::vector<KubePod> pods;
};

enum class KubeEventType { kAdded, kModified, kDeleted, kBookmark, kError };

struct KubeWatchEvent {
  KubeEventType type = KubeEventType::kAdded;
  KubePod pod;  // kBookmark: only pod.resource_version
  // kError: the Status object's code (410: the resourceVersion is too old) and message.
  int error_code = 0;
  std::string error_message;
};

absl::StatusOr<KubePodList> ParsePodList(std::string_view json);
absl::StatusOr<KubeWatchEvent> ParseWatchEvent(std::string_view json);
// The `message` of a Status body (an error answer), or the body's first 200 bytes.
std::string KubeStatusMessage(std::string_view body);
// A JSON merge patch (RFC 7386) setting metadata.annotations[key] to value, or
// removing it (nullopt: `null`).
std::string AnnotationMergePatch(std::string_view key, const std::optional<std::string>& value);

}  // namespace infera::discovery
