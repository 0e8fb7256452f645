// Umbrella header: everything a user of gearbox includes.
#ifndef GEARBOX_GEARBOX_H_
#define GEARBOX_GEARBOX_H_

#include "gearbox/clock.h"
#include "gearbox/gear_set.h"
#include "gearbox/host_memory_probe.h"
#include "gearbox/log.h"
#include "gearbox/memory_model.h"
#include "gearbox/memory_probe.h"
#include "gearbox/options.h"
#include "gearbox/plan.h"
#include "gearbox/policy.h"
#include "gearbox/resource_pool.h"
#include "gearbox/runtime.h"
#include "gearbox/snapshot.h"
#include "gearbox/stats.h"
#include "gearbox/tensor_ops.h"
#include "gearbox/update_record.h"
#include "gearbox/update_worker.h"

#endif  // GEARBOX_GEARBOX_H_
