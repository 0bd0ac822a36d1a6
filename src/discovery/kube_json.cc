#include "discovery/kube_json.h"

#include <nlohmann/json.hpp>

#include "discovery/internal/str_cat.h"

namespace infera::discovery {
namespace {

using internal::Cat;
using nlohmann::json;

const json* Member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string StringOr(const json* v, std::string fallback = "") {
  return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
}

absl::StatusOr<KubePod> PodFrom(const json& obj) {
  if (!obj.is_object()) return absl::InvalidArgumentError("a Pod must be a JSON object");
  const json* meta = Member(obj, "metadata");
  if (meta == nullptr || !meta->is_object()) {
    return absl::InvalidArgumentError("a Pod has no metadata object");
  }
  KubePod pod;
  pod.name = StringOr(Member(*meta, "name"));
  pod.resource_version = StringOr(Member(*meta, "resourceVersion"));
  pod.terminating = Member(*meta, "deletionTimestamp") != nullptr;
  if (const json* status = Member(obj, "status")) pod.phase = StringOr(Member(*status, "phase"));
  if (const json* annotations = Member(*meta, "annotations")) {
    if (const json* info = Member(*annotations, kWorkerInfoAnnotation); info && info->is_string()) {
      pod.worker_info = info->get<std::string>();
    }
  }
  return pod;
}

json Parse(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

absl::StatusOr<KubePodList> ParsePodList(std::string_view text) {
  const json doc = Parse(text);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("Pod list is not a JSON object");
  }
  KubePodList list;
  if (const json* meta = Member(doc, "metadata")) {
    list.resource_version = StringOr(Member(*meta, "resourceVersion"));
  }
  const json* items = Member(doc, "items");
  if (items != nullptr && !items->is_array()) {
    return absl::InvalidArgumentError("Pod list 'items' is not an array");
  }
  if (items != nullptr) {
    for (const json& item : *items) {
      auto pod = PodFrom(item);
      if (!pod.ok()) return pod.status();
      if (!pod->name.empty()) list.pods.push_back(*std::move(pod));
    }
  }
  return list;
}

absl::StatusOr<KubeWatchEvent> ParseWatchEvent(std::string_view text) {
  const json doc = Parse(text);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("watch event is not a JSON object");
  }
  const std::string type = StringOr(Member(doc, "type"));
  const json* object = Member(doc, "object");
  KubeWatchEvent event;
  if (type == "ERROR") {
    event.type = KubeEventType::kError;
    if (object != nullptr) {
      const json* code = Member(*object, "code");
      event.error_code = code != nullptr && code->is_number_integer() ? code->get<int>() : 0;
      event.error_message = StringOr(Member(*object, "message"), "ERROR");
    }
    return event;
  }
  if (object == nullptr)
    return absl::InvalidArgumentError(Cat("watch event '", type, "' has no object"));
  if (type == "BOOKMARK") {
    event.type = KubeEventType::kBookmark;
    if (const json* meta = Member(*object, "metadata")) {
      event.pod.resource_version = StringOr(Member(*meta, "resourceVersion"));
    }
    return event;
  }
  if (type == "ADDED") {
    event.type = KubeEventType::kAdded;
  } else if (type == "MODIFIED") {
    event.type = KubeEventType::kModified;
  } else if (type == "DELETED") {
    event.type = KubeEventType::kDeleted;
  } else {
    return absl::InvalidArgumentError(Cat("unknown watch event type '", type, "'"));
  }
  auto pod = PodFrom(*object);
  if (!pod.ok()) return pod.status();
  event.pod = *std::move(pod);
  return event;
}

std::string KubeStatusMessage(std::string_view body) {
  const json doc = Parse(body);
  if (const json* message = Member(doc, "message"); message != nullptr && message->is_string()) {
    return message->get<std::string>();
  }
  return std::string(body.substr(0, 200));
}

std::string AnnotationMergePatch(std::string_view key, const std::optional<std::string>& value) {
  json patch;
  patch["metadata"]["annotations"][std::string(key)] = value ? json(*value) : json(nullptr);
  return patch.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace infera::discovery
