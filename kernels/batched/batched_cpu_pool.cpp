// See batched_cpu_pool.hpp.  The loop's state is one 64-bit word (generation, first and end of
// the chunks not yet claimed) that claims change by compare-and-swap: a helper that wakes after
// its generation has ended finds another generation (or no chunk left) and claims nothing, so
// the job's fields are only read by a thread holding a claimed, unfinished chunk -- while the
// caller still waits.  The caller claims from the front, helpers from the back: a loop of calls
// on the same stack then gives each core mostly the products it had last time, still in its
// caches (claims from one counter handed them out by timing, and float32 32^3 stacks of 4-16
// ran slower on two threads than on one).
#include "batched_cpu_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kl {
namespace batched {
namespace {

constexpr int kGenBits = 24, kIdxBits = 20;
constexpr uint64_t kIdxMask = (uint64_t(1) << kIdxBits) - 1;
constexpr int64_t kMaxChunks = 1024;  // < 2^20
constexpr int kMaxThreads = 64;
constexpr int kSpinUs = 50;  // a helper's spin after a loop before it sleeps
constexpr double kChunkFlops = 1.0e5;  // ~1-2 us of one core's work

inline uint64_t pack(uint64_t gen, uint64_t lo, uint64_t hi) {
  return (gen << (2 * kIdxBits)) | (lo << kIdxBits) | hi;
}

struct Pool {
  std::mutex mu;  // guards posted and started; the condition variable's
  std::condition_variable cv;
  uint64_t posted = 0;  // the generation helpers are woken for
  int started = 0;      // helper threads running
  int sleeping = 0;     // helpers waiting on cv
  std::mutex caller;    // one loop at a time
  std::atomic<uint64_t> state{0};
  std::atomic<int64_t> done{0};  // chunks finished in the current generation
  uint64_t gen = 0;
  // the current loop (written by the caller before it publishes the generation)
  void (*fn)(void *, int64_t, int64_t) = nullptr;
  void *ctx = nullptr;
  int64_t count = 0;
  int64_t chunks = 0;
};

// Never destroyed: helpers may still sleep on it when the process exits.
Pool &pool() {
  static Pool *p = new Pool;
  return *p;
}

// Claims a chunk of generation gen, the first unclaimed one (front) or the last; false when none
// is left (or gen is over).
bool claim(Pool &p, uint64_t gen, bool front, int64_t &chunk) {
  uint64_t cur = p.state.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t g = cur >> (2 * kIdxBits), lo = (cur >> kIdxBits) & kIdxMask,
                   hi = cur & kIdxMask;
    if (g != gen || lo >= hi) return false;
    const uint64_t next = front ? pack(g, lo + 1, hi) : pack(g, lo, hi - 1);
    if (p.state.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      chunk = int64_t(front ? lo : hi - 1);
      return true;
    }
  }
}

void run_chunks(Pool &p, uint64_t gen, bool front) {
  int64_t c;
  while (claim(p, gen, front, c)) {
    p.fn(p.ctx, p.count * c / p.chunks, p.count * (c + 1) / p.chunks);
    p.done.fetch_add(1, std::memory_order_acq_rel);
  }
}

// The generation in the state word.
inline uint64_t generation(const Pool &p) {
  return p.state.load(std::memory_order_acquire) >> (2 * kIdxBits);
}

void helper(Pool *p) {
  uint64_t seen = 0;
  for (;;) {
    // spin a little after a loop: a caller that calls again at once (a loop of calls) finds
    // the helper awake, without a wake-up call; then sleep
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinUs);
    uint64_t g = generation(*p);
    for (int i = 0; g == seen; ++i, g = generation(*p)) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(p->mu);
      p->sleeping += 1;
      p->cv.wait(lock, [&] { return p->posted != seen; });
      p->sleeping -= 1;
      g = p->posted;
    }
    seen = g;
    run_chunks(*p, seen, false);
  }
}

}  // namespace

int pool_threads(int num_threads, double flops) {
  if (flops < kPoolMinFlops) return 1;
  int t = num_threads;
#ifdef _OPENMP
  if (t <= 0) t = omp_get_max_threads();
#else
  if (t <= 0) t = 1;
#endif
  // once: glibc's hardware_concurrency reads /sys/devices/system/cpu/online on every call
  // (~6 us, which put a step of +6 us on every stack from kPoolMinFlops up)
  static const int hw = int(std::thread::hardware_concurrency());
  if (hw > 0) t = std::min(t, hw);
  return std::max(1, std::min(t, kMaxThreads));
}

void parallel_for(int64_t count, int threads, double flops,
                  void (*fn)(void *, int64_t, int64_t), void *ctx) {
  Pool &p = pool();
  std::unique_lock<std::mutex> mine(p.caller, std::try_to_lock);
  if (threads <= 1 || count <= 1 || !mine.owns_lock()) {
    fn(ctx, 0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(p.mu);
    try {
      for (; p.started < threads - 1; ++p.started) std::thread(helper, &p).detach();
    } catch (...) {  // no thread to be had: the helpers that exist (maybe none) do
    }
  }
  // chunks: ~8 a thread (a late helper still finds some), each a whole number of products and
  // at least kChunkFlops of work where the loop has enough (each claim moves the state word's
  // cache line between cores: ~0.2 us, which 16 claims of a 2 us loop doubled)
  const int64_t by_work = std::max<int64_t>(threads, int64_t(flops / kChunkFlops));
  const int64_t chunks = std::min<int64_t>({count, int64_t(threads) * 8, by_work, kMaxChunks});
  p.fn = fn;
  p.ctx = ctx;
  p.count = count;
  p.chunks = chunks;
  p.done.store(0, std::memory_order_relaxed);
  p.gen = (p.gen + 1) & ((uint64_t(1) << kGenBits) - 1);
  if (p.gen == 0) p.gen = 1;
  p.state.store(pack(p.gen, 0, uint64_t(chunks)), std::memory_order_release);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.posted = p.gen;
    wake = p.sleeping > 0;
  }
  if (wake) p.cv.notify_all();  // (a spinning helper sees the state word change)
  run_chunks(p, p.gen, true);
  // what remains was claimed by a helper that is running it
  for (int spins = 0; p.done.load(std::memory_order_acquire) < chunks; ++spins) {
    if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace batched
}  // namespace kl
