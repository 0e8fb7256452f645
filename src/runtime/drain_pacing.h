// How long the event drain thread rests after a drain (AdaptiveGearRuntime).
//
// The drain thread folds the recording threads' rings into the window
// statistics. A fold costs tens of nanoseconds an event, so a request rate
// of tens of millions of events a second would keep a core busy folding, on
// the cores the requests run on. After a drain that took `elapsed`, the
// thread rests elapsed x (1 / share - 1): it is then busy at most `share`
// of the time. Events that find their ring full meanwhile are dropped and
// counted (the statistics tolerate sampling); at ordinary request rates a
// ring never fills during a rest.
#ifndef GEARBOX_SRC_RUNTIME_DRAIN_PACING_H_
#define GEARBOX_SRC_RUNTIME_DRAIN_PACING_H_

#include <algorithm>
#include <chrono>
#include <cmath>

namespace gearbox::internal {

// The longest rest, whatever a drain cost: a stop or a burst of new
// traffic waits at most this long for the next drain.
inline constexpr std::chrono::milliseconds kMaxDrainPause{50};

// Pure. `share` in (0, 1]; 1 means no rest.
inline std::chrono::nanoseconds DrainPause(std::chrono::nanoseconds elapsed, double share) {
  if (!(share > 0.0) || share >= 1.0 || elapsed <= std::chrono::nanoseconds::zero()) {
    return std::chrono::nanoseconds::zero();
  }
  const double rest = static_cast<double>(elapsed.count()) * (1.0 / share - 1.0);
  const double cap = static_cast<double>(std::chrono::nanoseconds(kMaxDrainPause).count());
  return std::chrono::nanoseconds(static_cast<int64_t>(std::min(rest, cap)));
}

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_RUNTIME_DRAIN_PACING_H_
