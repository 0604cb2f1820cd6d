/* GPU calibration probes: single-block micro-benchmarks timed with clock64().
 *
 * Each probe launches one thread block (so everything it measures happens on one SM), waits for
 * it, and returns raw counts: elapsed SM cycles and the work done in them.  Turning counts into
 * model parameters (L_sm, B_sm, θ, ops/cycle) is the Python side's job, so the probes stay
 * trivially checkable and the conversion can change without a rebuild.
 *
 * These are calibration tools, not hot-path kernels: they synchronise the device.
 */
#ifndef KRONLINALG_PROBE_H
#define KRONLINALG_PROBE_H

#include <stdint.h>

#include "kronlinalg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pointer chase through shared memory by one thread: `iters` dependent 4-byte loads.
 * cycles[0] = cycles for the whole chain. */
int kl_probe_smem_latency(int32_t iters, int64_t *cycles);

/* `warps` warps each make about `iters` (rounded up to whole bursts of 64) independent 4-byte
 * shared-memory loads per thread, lane l of a warp reading word l*stride (+ the load's index):
 * stride 1 is conflict-free, stride s makes gcd(s, 32)-way bank conflicts.
 * cycles[0] = elapsed cycles, bytes[0] = bytes loaded. */
int kl_probe_smem_bandwidth(int32_t warps, int32_t iters, int32_t stride, int64_t *cycles,
                            int64_t *bytes);

enum kl_mma_kind { KL_MMA_FP16 = 0, KL_MMA_BF16 = 1, KL_MMA_TF32 = 2, KL_MMA_FP64 = 3 };

/* `warps` warps each issue `iters` rounds of independent mma.sync instructions of `kind`
 * (FP16/BF16 m16n8k16, TF32 m16n8k8, FP64 m8n8k4).  cycles[0] = elapsed cycles,
 * ops[0] = 2·m·n·k per mma summed over all of them. */
int kl_probe_mma(int32_t kind, int32_t warps, int32_t iters, int64_t *cycles, int64_t *ops);

#ifdef __cplusplus
}
#endif

#endif
