#include "router/metrics/metrics.h"

#include <cmath>
#include <cstdio>

namespace infera::router {
namespace {

std::string FormatDouble(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string Join(std::string_view labels, std::string_view extra) {
  std::string s = "{";
  s += labels;
  if (!labels.empty() && !extra.empty()) s += ",";
  s += extra;
  s += "}";
  return s == "{}" ? std::string() : s;
}

}  // namespace

std::string EscapeLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string MetricLabel(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + EscapeLabel(value) + "\"";
}

void RenderHeader(std::string& out, std::string_view name, std::string_view type,
                  std::string_view help) {
  out += "# HELP ";
  out += name;
  out += " ";
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " ";
  out += type;
  out += "\n";
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micro_.fetch_add(static_cast<uint64_t>(std::max(0.0, value) * 1e6),
                       std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::Render(std::string& out, std::string_view name, std::string_view labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    std::string le =
        "le=\"" + (i < bounds_.size() ? FormatDouble(bounds_[i]) : std::string("+Inf")) + "\"";
    out +=
        std::string(name) + "_bucket" + Join(labels, le) + " " + std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_sum" + Join(labels, "") + " " +
         FormatDouble(static_cast<double>(sum_micro_.load()) / 1e6) + "\n";
  // _count equals the +Inf bucket by construction of the rendering above.
  out += std::string(name) + "_count" + Join(labels, "") + " " + std::to_string(cumulative) + "\n";
}

Histogram* HistogramFamily::Series(const std::string& labels) {
  base::MutexLock lock(mu_);
  auto& slot = series_[labels];
  if (!slot) slot = std::make_unique<Histogram>(bounds_);
  return slot.get();
}

void HistogramFamily::Observe(const std::string& labels, double value) {
  Series(labels)->Observe(value);
}

void HistogramFamily::Render(std::string& out) const {
  RenderHeader(out, name_, "histogram", help_);
  base::MutexLock lock(mu_);
  for (const auto& [labels, h] : series_) h->Render(out, name_, labels);
}

std::atomic<uint64_t>* CounterFamily::Series(const std::string& labels) {
  base::MutexLock lock(mu_);
  auto& slot = series_[labels];
  if (!slot) slot = std::make_unique<std::atomic<uint64_t>>(0);
  return slot.get();
}

void CounterFamily::Add(const std::string& labels, uint64_t delta) {
  Series(labels)->fetch_add(delta, std::memory_order_relaxed);
}

uint64_t CounterFamily::Get(const std::string& labels) const {
  base::MutexLock lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

void CounterFamily::Render(std::string& out) const {
  RenderHeader(out, name_, "counter", help_);
  base::MutexLock lock(mu_);
  for (const auto& [labels, v] : series_) {
    out +=
        name_ + Join(labels, "") + " " + std::to_string(v->load(std::memory_order_relaxed)) + "\n";
  }
}

}  // namespace infera::router
