// The CPU kernel's threads: a parallel loop whose caller never waits for a thread that has not
// started.  On a 2-core machine that other processes share, an OpenMP region's closing barrier
// waits for every team thread, and a woken thread may wait a whole time slice (~4-8 ms) before
// it runs: a 100 us stack then took milliseconds, so the kernel kept one thread below 1e8 flops
// and mid-size stacks ran on one core.  Here the work is split in chunks that the caller and
// the helper threads claim one by one; the caller waits only for chunks a helper has claimed
// (and so is running), so a helper that is late costs nothing but the wake-up call.  A helper
// spins for 50 us after a loop before it sleeps: a loop of calls finds it awake.
#pragma once

#include <cstdint>

namespace kl {
namespace batched {

// Threads a loop of `flops` may take: 1 below kPoolMinFlops or where num_threads or OpenMP's
// setting (OMP_NUM_THREADS) says 1; otherwise num_threads (<= 0: OpenMP's default, at most the
// machine's hardware threads).  `flops` in float64 terms (float32 work counts half: a core runs
// it twice as fast).  Handing half a loop to a helper that is awake costs ~0.6-1 us (the job's
// and the state word's cache lines move to its core and back), so the pool pays from ~2 us of
// one core's work (2-core EPYC: float64 16^3 x 16 even, 100 x 12^3 1.18x faster on two threads;
// float32 4 x 32^3, 1.3e5 in these terms, 0.86x).  It was 1e6 until the hardware_concurrency
// call below cost 6 us a loop.
constexpr double kPoolMinFlops = 1.5e5;
int pool_threads(int num_threads, double flops);

// fn(ctx, begin, end) over [0, count) on up to `threads` threads (the caller's included), in
// chunks; returns when all of it is done.  Every index is computed by exactly one call, so the
// result does not depend on which thread ran it.  A second caller while a loop runs (two Python
// threads) runs its loop on its own thread.
// `flops`: the whole loop's work, in pool_threads' terms (it sets how many chunks the loop is
// cut into).
void parallel_for(int64_t count, int threads, double flops,
                  void (*fn)(void *, int64_t, int64_t), void *ctx);

}  // namespace batched
}  // namespace kl
