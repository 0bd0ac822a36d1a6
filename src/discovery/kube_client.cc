#include "discovery/kube_client.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "discovery/etcd_json.h"
#include "discovery/internal/str_cat.h"

namespace infera::discovery {
namespace {

using internal::Cat;
using internal::HttpCallOptions;

constexpr size_t kMaxWatchEventBytes = 16 * 1024 * 1024;

absl::StatusOr<std::string> ReadTrimmed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat("cannot open ", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return std::string();
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// RFC 3986 unreserved characters stay; the rest is %XX (label selectors carry '=',
// ',', '!', '(' ...).
std::string QueryEscape(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// The Status of a non-2xx answer as an absl::Status.
absl::Status AnswerError(std::string_view what, const internal::HttpCallResult& r) {
  const std::string message =
      Cat("kubernetes: ", what, ": HTTP ", r.status, ": ", KubeStatusMessage(r.error_body));
  switch (r.status) {
    case 401:
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 410:
      return absl::OutOfRangeError(message);
    default:
      return r.status >= 500 ? absl::UnavailableError(message)
                             : absl::InvalidArgumentError(message);
  }
}

std::string PodsPath(std::string_view ns) {
  return Cat("/api/v1/namespaces/", QueryEscape(ns), "/pods");
}

}  // namespace

absl::StatusOr<KubeClientOptions> KubeClientOptions::InCluster(
    const std::string& sa_dir, const std::function<const char*(const char*)>& getenv) {
  const char* host = getenv("KUBERNETES_SERVICE_HOST");
  const char* port = getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "kubernetes: not inside a Pod (KUBERNETES_SERVICE_HOST is not set); give "
        "--k8s-api-server and --k8s-token-file");
  }
  KubeClientOptions o;
  const std::string h = host;
  // An IPv6 service address is bracketed in the URL.
  o.api_server = Cat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":",
                     port != nullptr && *port != '\0' ? port : "443");
  o.token_file = sa_dir + "/token";
  if (!ReadTrimmed(o.token_file).ok()) {
    return absl::FailedPreconditionError(
        Cat("kubernetes: no service account token at ", o.token_file));
  }
  if (std::ifstream(sa_dir + "/ca.crt")) o.ca_file = sa_dir + "/ca.crt";
  return o;
}

std::string InClusterNamespace(const std::string& sa_dir) {
  auto ns = ReadTrimmed(sa_dir + "/namespace");
  return ns.ok() && !ns->empty() ? *ns : "default";
}

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(KubeClientOptions options) {
  std::string_view url = options.api_server;
  internal::HttpEndpoint ep;
  if (url.substr(0, 8) == "https://") {
    ep.tls = true;
    url.remove_prefix(8);
  } else if (url.substr(0, 7) == "http://") {
    url.remove_prefix(7);
  } else {
    return absl::InvalidArgumentError(
        Cat("kubernetes API server must be https://host[:port] or http://host[:port], got '",
            options.api_server, "'"));
  }
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  std::string_view port;
  if (!url.empty() && url.front() == '[') {  // [IPv6]:port
    const size_t close = url.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("bad IPv6 host");
    ep.host = std::string(url.substr(1, close - 1));
    if (close + 1 < url.size() && url[close + 1] == ':') port = url.substr(close + 2);
  } else {
    const size_t colon = url.rfind(':');
    ep.host = std::string(url.substr(0, colon));
    if (colon != std::string_view::npos) port = url.substr(colon + 1);
  }
  ep.port = port.empty() ? (ep.tls ? "443" : "80") : std::string(port);
  if (ep.host.empty() || ep.host.find('/') != std::string::npos ||
      ep.port.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(
        Cat("kubernetes API server must be https://host[:port] or http://host[:port], got '",
            options.api_server, "'"));
  }
  ep.ca_file = options.ca_file;
  if (options.request_timeout_ms <= 0 || options.watch_idle_timeout_ms <= 0 ||
      options.watch_timeout_s <= 0) {
    return absl::InvalidArgumentError("kubernetes client timeouts must be positive");
  }
  return std::unique_ptr<KubeClient>(new KubeClient(std::move(options), std::move(ep)));
}

KubeClient::KubeClient(KubeClientOptions options, internal::HttpEndpoint endpoint)
    : options_(std::move(options)), endpoint_(std::move(endpoint)) {}

absl::StatusOr<internal::HttpCallResult> KubeClient::Call(
    HttpCallOptions call, const std::function<absl::Status(std::string_view)>& on_data) {
  std::string token = options_.token;
  if (!options_.token_file.empty()) {
    auto read = ReadTrimmed(options_.token_file);
    if (!read.ok()) return absl::UnavailableError(Cat("kubernetes: ", read.status().message()));
    token = *read;
  }
  if (!token.empty()) call.headers.emplace_back("Authorization", "Bearer " + token);
  call.headers.emplace_back("Accept", "application/json");
  call.headers.emplace_back("User-Agent", "infera-router");
  call.request_timeout_ms = options_.request_timeout_ms;
  call.idle_timeout_ms = options_.watch_idle_timeout_ms;
  call.service = "kubernetes";
  return internal::HttpCall(endpoint_, call, cancelled_, on_data);
}

absl::StatusOr<KubePodList> KubeClient::ListPods(std::string_view ns, std::string_view selector) {
  HttpCallOptions call;
  call.method = "GET";
  call.target = Cat(PodsPath(ns), "?labelSelector=", QueryEscape(selector));
  std::string body;
  auto r = Call(call, [&](std::string_view data) {
    body.append(data);
    return absl::OkStatus();
  });
  if (!r.ok()) return r.status();
  if (r->status != 200) return AnswerError("list pods", *r);
  return ParsePodList(body);
}

absl::Status KubeClient::WatchPods(
    std::string_view ns, std::string_view selector, std::string_view resource_version,
    const std::function<absl::Status(const KubeWatchEvent&)>& on_event) {
  HttpCallOptions call;
  call.method = "GET";
  call.streaming = true;
  call.target =
      Cat(PodsPath(ns), "?labelSelector=", QueryEscape(selector),
          "&watch=true&allowWatchBookmarks=true&timeoutSeconds=", options_.watch_timeout_s);
  if (!resource_version.empty()) {
    call.target += Cat("&resourceVersion=", QueryEscape(resource_version));
  }
  // One JSON object per line; a chunk may end anywhere inside one.
  JsonObjectSplitter splitter(kMaxWatchEventBytes);
  std::vector<std::string> objects;
  auto r = Call(call, [&](std::string_view data) -> absl::Status {
    objects.clear();
    if (absl::Status s = splitter.Feed(data, &objects); !s.ok()) return s;
    for (const std::string& text : objects) {
      auto event = ParseWatchEvent(text);
      if (!event.ok()) return event.status();
      if (absl::Status s = on_event(*event); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  if (!r.ok()) return r.status();
  if (r->status != 200) return AnswerError("watch pods", *r);
  return absl::OkStatus();
}

absl::Status KubeClient::PatchPodAnnotation(std::string_view ns, std::string_view pod,
                                            std::string_view key,
                                            const std::optional<std::string>& value) {
  HttpCallOptions call;
  call.method = "PATCH";
  call.target = Cat(PodsPath(ns), "/", QueryEscape(pod));
  call.content_type = "application/merge-patch+json";
  call.body = AnnotationMergePatch(key, value);
  auto r = Call(call, [](std::string_view) { return absl::OkStatus(); });
  if (!r.ok()) return r.status();
  if (r->status != 200) return AnswerError(Cat("patch pod ", pod), *r);
  return absl::OkStatus();
}

}  // namespace infera::discovery
