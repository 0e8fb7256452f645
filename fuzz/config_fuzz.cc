// Fuzzes the config parser: any bytes either parse into a valid
// configuration (whose gear set and options validate) or give an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gearbox/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = gearbox::ParseConfig(text);
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();  // errors always say why
    return 0;
  }
  const gearbox::CombinationSpec spec =
      gearbox::InitialCombinations(config->dims, config->combination_spec);
  if (!gearbox::GearSet::Create(config->dims, 1, 0.0, spec).ok()) __builtin_trap();
  if (!gearbox::ValidateAdaptiveOptions(config->adaptive).ok()) __builtin_trap();
  if (!gearbox::ValidateReplanOptions(config->replan).ok()) __builtin_trap();
  return 0;
}
