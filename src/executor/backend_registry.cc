#include <charconv>

#include "gearbox/backend.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

struct BackendRegistry::Factories {
  Mutex mu;
  std::map<std::string, BackendFactory, std::less<>> by_name ABSL_GUARDED_BY(mu);
};

BackendRegistry::BackendRegistry() : factories_(std::make_unique<Factories>()) {}
BackendRegistry::~BackendRegistry() = default;

BackendRegistry& BackendRegistry::Global() {
  static BackendRegistry* registry = new BackendRegistry();
  return *registry;
}

absl::Status BackendRegistry::Register(std::string name, BackendFactory factory) {
  MutexLock lock(&factories_->mu);
  if (factories_->by_name.count(name)) {
    return internal::InvalidField("backend", internal::Cat("\"", name, "\""),
                                  "a name not registered yet");
  }
  factories_->by_name.emplace(std::move(name), std::move(factory));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> BackendRegistry::Create(
    std::string_view name, const BackendParams& params) const {
  BackendFactory factory;
  std::string known;
  {
    MutexLock lock(&factories_->mu);
    auto it = factories_->by_name.find(name);
    if (it != factories_->by_name.end()) factory = it->second;
    for (const auto& [n, f] : factories_->by_name) known += (known.empty() ? "" : ", ") + n;
  }
  if (!factory) {
    return internal::InvalidField(
        "backend", internal::Cat("\"", name, "\""),
        internal::Cat("one of: ", known.empty() ? "(none built)" : known));
  }
  return factory(params);
}

std::vector<std::string> BackendRegistry::Names() const {
  MutexLock lock(&factories_->mu);
  std::vector<std::string> names;
  for (const auto& [n, f] : factories_->by_name) names.push_back(n);
  return names;
}

absl::StatusOr<int64_t> IntParam(const BackendParams& params, const std::string& key,
                                 int64_t fallback, int64_t min, int64_t max) {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  int64_t v = 0;
  const std::string& s = it->second;
  auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (e != std::errc() || p != s.data() + s.size() || v < min || v > max) {
    return internal::InvalidField(key, internal::Cat("\"", s, "\""),
                                  internal::Cat("an integer in [", min, ", ", max, "]"));
  }
  return v;
}

}  // namespace gearbox
