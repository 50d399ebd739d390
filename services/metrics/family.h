// A metric family: one name, help text, label names, and one child metric per distinct set
// of label values (like prometheus-cpp's Family<T>).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "services/metrics/text_format.h"

namespace ced::metrics {

// Label name -> label value. Any value is valid (it is escaped on output).
using Labels = std::map<std::string, std::string>;

// Type-erased part of a family, used by the Registry. Thread-safe.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  virtual std::string_view type_name() const = 0;

  // Appends "# HELP", "# TYPE" and every child's samples, children ordered by label values.
  virtual void Serialize(std::string* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

  void AppendHeader(std::string* out) const {
    absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ",
                    std::string(type_name()), "\n");
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

// T is Counter, Gauge or Histogram. Created and owned by a Registry; children live as long
// as the family, so the pointers and references handed out stay valid for the registry's
// lifetime. Thread-safe; a repeat lookup takes a reader lock and one map search (hot paths
// should keep the returned pointer).
template <typename T>
class Family final : public FamilyBase {
 public:
  // The child for `labels`, created on first use. InvalidArgument when the label names are
  // not exactly label_names().
  absl::StatusOr<T*> Get(const Labels& labels) {
    if (labels.size() != label_names().size()) return LabelMismatch(labels);
    std::vector<std::string> values;
    values.reserve(labels.size());
    for (const std::string& label_name : label_names()) {
      auto it = labels.find(label_name);
      if (it == labels.end()) return LabelMismatch(labels);
      values.push_back(it->second);
    }
    return GetOrCreate(std::move(values));
  }

  // The child for label values given in label_names() order. InvalidArgument on a count
  // mismatch.
  absl::StatusOr<T*> GetWithValues(std::vector<std::string> values) {
    if (values.size() != label_names().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metric '", name(), "' has ", label_names().size(), " label(s) [",
          absl::StrJoin(label_names(), ","), "] but ", values.size(), " value(s) were given"));
    }
    return GetOrCreate(std::move(values));
  }

  // Like Get / GetWithValues for label names fixed in code: a mismatch is a programmer error
  // and aborts (CED_CHECK). Use Get() when labels come from input.
  T& WithLabels(const Labels& labels) {
    absl::StatusOr<T*> child = Get(labels);
    CED_CHECK(child.ok());
    return **child;
  }
  T& WithLabelValues(std::vector<std::string> values) {
    absl::StatusOr<T*> child = GetWithValues(std::move(values));
    CED_CHECK(child.ok());
    return **child;
  }

  // Number of children.
  size_t size() const {
    std::shared_lock lock(mu_);
    return children_.size();
  }

  const typename T::Params& params() const { return params_; }
  std::string_view type_name() const override { return T::kTypeName; }

  void Serialize(std::string* out) const override {
    AppendHeader(out);
    std::shared_lock lock(mu_);
    for (const auto& [values, child] : children_) {
      child->AppendSamples(name(), label_names(), values, out);
    }
  }

 private:
  friend class Registry;

  Family(std::string name, std::string help, std::vector<std::string> label_names,
         typename T::Params params)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        params_(std::move(params)) {
    // A family without labels has exactly one child; create it so it is exported as 0.
    if (this->label_names().empty()) {
      std::unique_lock lock(mu_);
      children_.emplace(std::vector<std::string>{}, std::unique_ptr<T>(new T(params_)));
    }
  }

  T* GetOrCreate(std::vector<std::string> values) {
    {
      std::shared_lock lock(mu_);
      auto it = children_.find(values);
      if (it != children_.end()) return it->second.get();
    }
    std::unique_lock lock(mu_);
    auto [it, inserted] = children_.try_emplace(std::move(values));
    if (inserted) it->second.reset(new T(params_));
    return it->second.get();
  }

  absl::Status LabelMismatch(const Labels& labels) const {
    std::vector<std::string> given;
    for (const auto& [label_name, value] : labels) given.push_back(label_name);
    return absl::InvalidArgumentError(
        absl::StrCat("metric '", name(), "' has labels [", absl::StrJoin(label_names(), ","),
                     "] but was given [", absl::StrJoin(given, ","), "]"));
  }

  const typename T::Params params_;
  // std::shared_mutex rather than absl::Mutex: ThreadSanitizer understands it even when absl
  // is a prebuilt, uninstrumented library.
  mutable std::shared_mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;  // Guarded by mu_.
};

}  // namespace ced::metrics
