#include "services/metrics/registry.h"

#include <cmath>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "services/metrics/names.h"

namespace ced::metrics {

template <typename T>
absl::StatusOr<Family<T>*> Registry::Add(std::string_view name_view, std::string_view help,
                                         std::vector<std::string> label_names,
                                         typename T::Params params) {
  const std::string name(name_view);
  RETURN_IF_ERROR(ValidateMetricName(name));
  std::set<std::string_view> seen;
  for (const std::string& label_name : label_names) {
    absl::Status status = ValidateLabelName(label_name);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metric '", name, "': ", status.message()));
    }
    if (!seen.insert(label_name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", name, "': label name '", label_name, "' is repeated"));
    }
  }

  std::vector<std::string> sample_names;
  for (std::string_view suffix : T::SampleSuffixes()) {
    sample_names.push_back(name + std::string(suffix));
  }

  std::unique_lock lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    FamilyBase* existing = it->second.get();
    if (existing->type_name() != T::kTypeName) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' is already registered as a ",
                       std::string(existing->type_name()), ", not a ", T::kTypeName));
    }
    auto* family = static_cast<Family<T>*>(existing);
    if (family->label_names() != label_names) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' is already registered with labels [",
                       absl::StrJoin(family->label_names(), ","), "], not [",
                       absl::StrJoin(label_names, ","), "]"));
    }
    if (!(family->params() == params)) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' is already registered with other parameters"));
    }
    return family;
  }
  for (const std::string& sample_name : sample_names) {
    auto clash = sample_names_.find(sample_name);
    if (clash != sample_names_.end()) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' would write samples named '", sample_name,
                       "', which metric '", clash->second, "' already writes"));
    }
  }
  if (auto clash = sample_names_.find(name); clash != sample_names_.end()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "metric name '", name, "' is already a sample name of metric '", clash->second, "'"));
  }

  auto* family = new Family<T>(name, std::string(help), std::move(label_names), std::move(params));
  families_.emplace(name, std::unique_ptr<FamilyBase>(family));
  for (std::string& sample_name : sample_names) {
    sample_names_.emplace(std::move(sample_name), name);
  }
  return family;
}

absl::StatusOr<Family<Counter>*> Registry::AddCounter(std::string_view name, std::string_view help,
                                                      std::vector<std::string> label_names) {
  return Add<Counter>(name, help, std::move(label_names), Counter::Params{});
}

absl::StatusOr<Family<Gauge>*> Registry::AddGauge(std::string_view name, std::string_view help,
                                                  std::vector<std::string> label_names) {
  return Add<Gauge>(name, help, std::move(label_names), Gauge::Params{});
}

absl::StatusOr<Family<Histogram>*> Registry::AddHistogram(std::string_view name,
                                                          std::string_view help,
                                                          std::vector<double> bounds,
                                                          std::vector<std::string> label_names) {
  absl::Status status = ValidateBuckets(bounds);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", std::string(name), "': ", status.message()));
  }
  if (!bounds.empty() && std::isinf(bounds.back())) bounds.pop_back();
  for (const std::string& label_name : label_names) {
    if (label_name == "le") {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram '", std::string(name), "': label name 'le' is reserved"));
    }
  }
  return Add<Histogram>(name, help, std::move(label_names), Histogram::Params{std::move(bounds)});
}

void Registry::AddCollectHook(std::function<void()> hook) {
  std::unique_lock lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::Serialize() const {
  std::vector<std::function<void()>> hooks;
  {
    std::unique_lock lock(mu_);
    hooks = hooks_;
  }
  for (const auto& hook : hooks) hook();

  std::string out;
  std::shared_lock lock(mu_);
  for (const auto& [name, family] : families_) family->Serialize(&out);
  return out;
}

absl::StatusOr<Counter*> AddUnlabelledCounter(Registry& registry, std::string_view name,
                                              std::string_view help) {
  auto family = registry.AddCounter(name, help);
  if (!family.ok()) return family.status();
  return &(*family)->WithLabels({});
}

absl::StatusOr<Gauge*> AddUnlabelledGauge(Registry& registry, std::string_view name,
                                          std::string_view help) {
  auto family = registry.AddGauge(name, help);
  if (!family.ok()) return family.status();
  return &(*family)->WithLabels({});
}

absl::StatusOr<Histogram*> AddUnlabelledHistogram(Registry& registry, std::string_view name,
                                                  std::string_view help,
                                                  std::vector<double> bounds) {
  auto family = registry.AddHistogram(name, help, std::move(bounds));
  if (!family.ok()) return family.status();
  return &(*family)->WithLabels({});
}

}  // namespace ced::metrics
