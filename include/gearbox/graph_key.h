// GraphKey: the integer that names one compiled graph in the resource pool.
// Its own header so that layers below the runtime (statistics keep the keys of
// the graphs each gear ran on) can name it without the pool.
#ifndef GEARBOX_GRAPH_KEY_H_
#define GEARBOX_GRAPH_KEY_H_

#include <cstdint>

namespace gearbox {

using GraphKey = uint64_t;

}  // namespace gearbox

#endif  // GEARBOX_GRAPH_KEY_H_
