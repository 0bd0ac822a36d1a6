// Metrics: the router's Prometheus series (architecture §13; doc/router.md lists
// them). Counters and histograms are recorded from any thread; Render() writes the
// text exposition format (checked by `promtool check metrics` in the tests).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace infera::router {

// A histogram with fixed upper bounds (le), cumulative on render.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines for `name{labels}`.
  void Render(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1 (+Inf)
  std::atomic<uint64_t> sum_micro_{0};               // sum in millionths
  std::atomic<uint64_t> count_{0};
};

// A family of histograms keyed by their label string.
class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<double> bounds)
      : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)) {}
  // `labels` is the rendered label set, e.g. `role="mixed"`.
  void Observe(const std::string& labels, double value);
  // The series for `labels`, created if missing; the pointer stays valid for the
  // family's lifetime (hot paths keep it instead of looking the labels up).
  Histogram* Series(const std::string& labels);
  void Render(std::string& out) const;

 private:
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable base::Mutex mu_;
  std::map<std::string, std::unique_ptr<Histogram>> series_ ABSL_GUARDED_BY(mu_);
};

// A family of counters keyed by their label string.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}
  void Add(const std::string& labels, uint64_t delta = 1);
  // The counter for `labels`, created if missing; valid for the family's lifetime.
  std::atomic<uint64_t>* Series(const std::string& labels);
  uint64_t Get(const std::string& labels) const;
  void Render(std::string& out) const;

 private:
  std::string name_, help_;
  mutable base::Mutex mu_;
  std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>> series_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value (backslash, quote, newline).
std::string EscapeLabel(std::string_view value);
// `name="value"` with the value escaped.
std::string MetricLabel(std::string_view name, std::string_view value);
// Appends "# HELP name help\n# TYPE name type\n".
void RenderHeader(std::string& out, std::string_view name, std::string_view type,
                  std::string_view help);

}  // namespace infera::router
