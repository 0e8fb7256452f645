// Hand-made traces shared by the replay tests (replay_test, executed_replay_test).
#ifndef GEARBOX_TESTS_REPLAY_FIXTURES_H_
#define GEARBOX_TESTS_REPLAY_FIXTURES_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "gearbox/trace.h"

namespace gearbox::replay_fixtures {

// A one-dimensional SEQLEN trace of (time, size) rows.
inline Trace SeqTrace(const std::vector<std::pair<double, int64_t>>& rows) {
  Trace t;
  t.dimensions = {"SEQLEN"};
  for (auto [time, size] : rows) {
    t.time.push_back(time);
    t.sizes.push_back(size);
  }
  return t;
}

}  // namespace gearbox::replay_fixtures

#endif  // GEARBOX_TESTS_REPLAY_FIXTURES_H_
