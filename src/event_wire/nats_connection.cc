#include "event_wire/nats_connection.h"

#include <charconv>
#include <cstring>

#include "event_wire/nats_subject.h"

namespace infera::events {

absl::Status NatsError(const std::string& what, natsStatus s, int js_error) {
  std::string text = what + ": " + natsStatus_GetText(s);
  if (js_error != 0) text += " (JetStream error " + std::to_string(js_error) + ")";
  return absl::UnavailableError(text);
}

void DestroySubscription(natsSubscription*& sub, int64_t drain_timeout_ms) {
  if (sub == nullptr) return;
  if (natsSubscription_Drain(sub) == NATS_OK) {
    natsSubscription_WaitForDrainCompletion(sub, drain_timeout_ms);
  } else {
    natsSubscription_Unsubscribe(sub);
  }
  natsSubscription_Destroy(sub);
  sub = nullptr;
}

std::optional<uint64_t> EngineSeqHeader(natsMsg* msg) {
  const char* value = nullptr;
  const std::string key(kNatsSeqHeader);
  if (natsMsgHeader_Get(msg, key.c_str(), &value) != NATS_OK || value == nullptr) {
    return std::nullopt;
  }
  uint64_t seq = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, seq);
  if (ec != std::errc() || p != end || p == value) return std::nullopt;
  return seq;
}

absl::StatusOr<std::unique_ptr<NatsConnection>> NatsConnection::Connect(NatsOptions options) {
  std::unique_ptr<NatsConnection> c(new NatsConnection(std::move(options)));
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, c->options_.url.c_str());
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, c->options_.reconnect_wait_ms);
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, c->options_.request_timeout_ms);
  // With a connected callback the first connect does not block while no server answers.
  if (s == NATS_OK) {
    s = natsOptions_SetRetryOnFailedConnect(opts, true, &NatsConnection::OnReconnected, c.get());
  }
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(opts, &NatsConnection::OnReconnected, c.get());
  if (s == NATS_OK && !c->options_.name.empty())
    s = natsOptions_SetName(opts, c->options_.name.c_str());
  if (s == NATS_OK && c->options_.on_async_error) {
    s = natsOptions_SetErrorHandler(opts, &NatsConnection::OnAsyncError, c.get());
  }
  if (s == NATS_OK) {
    s = natsConnection_Connect(&c->nc_, opts);
    if (s == NATS_NOT_YET_CONNECTED) s = NATS_OK;  // connects in the background
  }
  natsOptions_Destroy(opts);
  if (s != NATS_OK) return NatsError("nats connect to " + c->options_.url, s);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = c->options_.request_timeout_ms;
  s = natsConnection_JetStream(&c->js_, c->nc_, &jo);
  if (s != NATS_OK) return NatsError("nats jetstream context", s);
  return c;
}

NatsConnection::~NatsConnection() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
}

void NatsConnection::OnReconnected(natsConnection*, void* closure) {
  auto* self = static_cast<NatsConnection*>(closure);
  if (self->options_.on_reconnect) self->options_.on_reconnect();
}

void NatsConnection::OnAsyncError(natsConnection*, natsSubscription* sub, natsStatus s,
                                  void* closure) {
  auto* self = static_cast<NatsConnection*>(closure);
  if (self->options_.on_async_error) self->options_.on_async_error(sub, s);
}

bool NatsConnection::connected() const {
  return nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

absl::Status NatsConnection::EnsureStream(const NatsStreamLimits& limits) {
  const std::string name(kNatsStreamName);
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, name.c_str(), nullptr, &jerr);
  if (s == NATS_OK) {
    jsStreamInfo_Destroy(si);
    return absl::OkStatus();
  }
  if (s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
    return NatsError("stream info " + name, s, jerr);
  }
  const std::string subjects(kNatsStreamSubjects);
  const char* subject_list[] = {subjects.c_str()};
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  cfg.Subjects = subject_list;
  cfg.SubjectsLen = 1;
  cfg.Storage = js_FileStorage;
  cfg.Retention = js_LimitsPolicy;
  cfg.Discard = js_DiscardOld;
  cfg.MaxBytes = limits.max_bytes;
  cfg.MaxMsgs = limits.max_msgs;
  jerr = static_cast<jsErrCode>(0);
  s = js_AddStream(&si, js_, &cfg, nullptr, &jerr);
  if (s == NATS_OK) {
    jsStreamInfo_Destroy(si);
    return absl::OkStatus();
  }
  // Another relay (or the router) created it in between.
  if (jerr == JSStreamNameExistErr) return absl::OkStatus();
  return NatsError("create stream " + name, s, jerr);
}

absl::StatusOr<NatsStreamPosition> NatsConnection::StreamPosition() {
  const std::string name(kNatsStreamName);
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, name.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return NatsError("stream info " + name, s, jerr);
  const NatsStreamPosition position{.first_seq = si->State.FirstSeq,
                                    .last_seq = si->State.LastSeq,
                                    .created_ns = static_cast<uint64_t>(si->Created)};
  jsStreamInfo_Destroy(si);
  return position;
}

absl::StatusOr<std::optional<uint64_t>> NatsConnection::LastEngineSeq(const std::string& subject) {
  const std::string name(kNatsStreamName);
  natsMsg* msg = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetLastMsg(&msg, js_, name.c_str(), subject.c_str(), nullptr, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) return std::optional<uint64_t>();
  if (s != NATS_OK) return NatsError("last message of " + subject, s, jerr);
  std::optional<uint64_t> seq = EngineSeqHeader(msg);
  natsMsg_Destroy(msg);
  return seq;
}

}  // namespace infera::events
