/* devices/sim_hw.h — tandem's catalogue of hardware profiles for the system simulator
 * (scheduler/sched_sim_model.h prices whatever catalogue it is given; this one names the GPUs
 * and cards tandem serves on, with GLITCHES' and our own measured calibration points). */
#ifndef TANDEM_DEVICES_SIM_HW_H
#define TANDEM_DEVICES_SIM_HW_H
#include "scheduler/sched_sim_model.h"

/* The catalogue (a static table; any thread). */
const sched_sim_catalog *devices_sim_hw(void);
/* The sparse prefill methods measured on tandem's H200 (`tandem simulate --sparse-prefill`):
 * element i, NULL past the end; by name, NULL when unknown. */
const sched_sim_sparse *devices_sim_sparse_at(int i);
const sched_sim_sparse *devices_sim_sparse(const char *name);

#endif
