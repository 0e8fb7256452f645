// A gear combination (one gear per dimension): the key of a simulated
// compiled graph in the replays (replay.cc, fleet_replay.cc).
#ifndef GEARBOX_SRC_SIM_GRAPH_COMBO_H_
#define GEARBOX_SRC_SIM_GRAPH_COMBO_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gearbox/gear_set.h"

namespace gearbox::internal {

struct Combo {
  int n = 0;
  int64_t gear[kMaxDimensions] = {};
  bool operator==(const Combo& o) const { return n == o.n && std::equal(gear, gear + n, o.gear); }
};

// FNV-1a over the gears.
struct ComboHash {
  size_t operator()(const Combo& c) const {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < c.n; ++i) h = (h ^ static_cast<uint64_t>(c.gear[i])) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_SIM_GRAPH_COMBO_H_
