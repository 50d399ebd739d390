// Registry: owns metric families and renders them in the Prometheus text format 0.0.4.
//
//   Registry registry;
//   ASSIGN_OR_RETURN(Family<Counter>* requests,
//                    registry.AddCounter("ced_requests_total", "Requests.", {"outcome"}));
//   Counter& ok = requests->WithLabels({{"outcome", "ok"}});  // Keep the reference.
//   ok.Increment();
//   std::string text = registry.Serialize();
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "services/metrics/counter.h"
#include "services/metrics/family.h"
#include "services/metrics/histogram.h"

namespace ced::metrics {

// Thread-safe. Families live until the registry is destroyed; the registry must outlive
// every pointer it handed out and every server scraping it.
class Registry final {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers (or finds) a family. Errors:
  //  - InvalidArgument: bad metric/label name, duplicate label name, "le" as a histogram
  //    label, bad histogram bounds;
  //  - AlreadyExists: `name` is registered with another type, other label names or other
  //    bounds, or one of its sample names (name, name_bucket/_sum/_count for histograms)
  //    collides with another family's sample names.
  // The same name with the same type, labels (and bounds) returns the existing family; its
  // first help text is kept.
  absl::StatusOr<Family<Counter>*> AddCounter(std::string_view name, std::string_view help,
                                              std::vector<std::string> label_names = {});
  absl::StatusOr<Family<Gauge>*> AddGauge(std::string_view name, std::string_view help,
                                          std::vector<std::string> label_names = {});
  // `bounds` are the finite bucket upper bounds (a trailing +Inf is dropped; it is implicit).
  absl::StatusOr<Family<Histogram>*> AddHistogram(std::string_view name, std::string_view help,
                                                  std::vector<double> bounds,
                                                  std::vector<std::string> label_names = {});

  // `hook` runs at the start of every Serialize(), without registry locks held (it may set
  // gauges or register families). Used to refresh values sampled at scrape time. Hooks may run
  // concurrently when scrapes overlap.
  void AddCollectHook(std::function<void()> hook);

  // The text exposition format 0.0.4: one block per family, families ordered by name,
  // children by label values.
  std::string Serialize() const;

 private:
  template <typename T>
  absl::StatusOr<Family<T>*> Add(std::string_view name, std::string_view help,
                                 std::vector<std::string> label_names, typename T::Params params);

  mutable std::shared_mutex mu_;  // Guards the three members below.
  std::map<std::string, std::unique_ptr<FamilyBase>, std::less<>> families_;
  // Every sample name in use -> the family that writes it.
  std::map<std::string, std::string, std::less<>> sample_names_;
  std::vector<std::function<void()>> hooks_;
};

// Registers (or finds) a metric without labels and returns its only child.
absl::StatusOr<Counter*> AddUnlabelledCounter(Registry& registry, std::string_view name,
                                              std::string_view help);
absl::StatusOr<Gauge*> AddUnlabelledGauge(Registry& registry, std::string_view name,
                                          std::string_view help);
absl::StatusOr<Histogram*> AddUnlabelledHistogram(Registry& registry, std::string_view name,
                                                  std::string_view help,
                                                  std::vector<double> bounds);

}  // namespace ced::metrics
