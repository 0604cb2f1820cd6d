// Host side of the CUDA kernels: which tile shape runs a pattern, and the launch itself.
#ifndef KRONLINALG_KS_CUDA_LAUNCH_CUH
#define KRONLINALG_KS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda_device.hpp"
#include "knobs.hpp"
#include "ks_cuda_kernels.cuh"
#include "ks_cuda_natural.cuh"
#include "ks_cuda_pipe.cuh"

namespace kl {
namespace ks {

// Probing (kl_ks_cuda_tile): the dispatch below runs unchanged with a probe set on the calling
// thread; every shape launcher, where it has fixed its tile and before it allocates or launches
// anything, records (TN, TK, TL, TJ, kind: ks.h's KL_KS_TILE_*) in it and returns KL_OK.
// fills_device counts the probe's SMs and wgmma_runs_here takes the probe's answer, so a probe
// needs no GPU.  Without a probe (every launch) the cost is one thread-local pointer test.
struct TileProbe {
  int units = 0;       // SMs that fills_device counts
  bool wgmma = false;  // whether wgmma_runs_here says yes (only where the build has sm_90a code)
  bool hit = false;
  int64_t out[5] = {0, 0, 0, 0, 0};  // TN, TK, TL, TJ, kind
};
extern thread_local TileProbe *g_tile_probe;  // (ks_cuda.cu)

// True (the tile recorded) when probing: the caller then returns KL_OK without launching.
inline bool probed(int tn, int tk, int tl, int tj, int kind) {
  TileProbe *const pr = g_tile_probe;
  if (!pr) return false;
  pr->out[0] = tn, pr->out[1] = tk, pr->out[2] = tl, pr->out[3] = tj, pr->out[4] = kind;
  pr->hit = true;
  return true;
}

// TJ: the j run a block covers.  d itself when it is a power of two up to 16, else the largest
// of 16, 8, 4 dividing d (no padded j), else the next power of two (padding < half the tile).
inline int pick_tj(int64_t d) {
  if (d == 1 || d == 2 || d == 4 || d == 8 || d == 16) return int(d);
  if (d % 16 == 0) return 16;
  if (d % 8 == 0) return 8;
  if (d % 4 == 0) return 4;
  return d < 4 ? 4 : (d < 8 ? 8 : 16);
}

// TK among a TJ's tile shapes: least padding of b, plus 8/TK for re-reading the X tile from L2
// once per k tile.
inline int pick_tk(int64_t b, const int *tks, int n) {
  int best = tks[0];
  double best_cost = 1e300;
  for (int t = 0; t < n; ++t) {
    const double tk = tks[t];
    const double cost = double((b + tks[t] - 1) / tks[t]) * tk / double(b) + 8.0 / tk;
    if (cost < best_cost) {
      best_cost = cost;
      best = tks[t];
    }
  }
  return best;
}

inline int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("ks_matmul_cuda: ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

inline Params make_params(const kl_ks_problem *p, int TN, int TK, int TJ) {
  Params q;
  q.a = p->a;
  q.b = p->b;
  q.c = p->c;
  q.d = p->d;
  q.B = p->batch;
  q.K = p->values;
  q.X = p->x;
  q.x_ld = p->x_ld;
  q.Y = p->y;
  q.y_ld = p->y_ld;
  q.nN = (p->batch + TN - 1) / TN;
  q.nK = (p->b + TK - 1) / TK;
  q.nJ = (p->d + TJ - 1) / TJ;
  return q;
}

inline int launch_checked(const Params &q, void (*kernel)(Params), int smem, cudaStream_t s,
                          int threads = kThreads) {
  const int64_t blocks = q.a * q.nJ * q.nN * q.nK;
  if (blocks > 0x7fffffffLL) return fail(KL_ERR_INVALID, "ks_matmul_cuda: problem too large for one grid");
  if (smem > 48 * 1024) {
    const cudaError_t e = opt_in_smem(reinterpret_cast<const void *>(kernel), smem);
    if (e != cudaSuccess) return cuda_fail(e, "shared memory opt-in");
  }
  kernel<<<unsigned(blocks), threads, smem, s>>>(q);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "launch");
}

// The factor transposed to [i][j][k][l] (from its contiguous (a, b, c, d)), for the KT kernels.
template <class T>
__global__ void transpose_values(const T *__restrict__ K, T *__restrict__ Kt, int64_t a, int64_t b,
                                 int64_t c, int64_t d) {
  const int64_t n = a * b * c * d;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = t % c, kji = t / c, k = kji % b, ji = kji / b, j = ji % d, i = ji / d;
    Kt[t] = K[((i * b + k) * c + l) * d + j];
  }
}

template <class T>
void launch_transpose(const kl_ks_problem *p, void *out, cudaStream_t s) {
  const int64_t n = p->a * p->b * p->c * p->d;
  DeviceInfo dev;
  const int sms = query_device(&dev) == cudaSuccess ? dev.sms : 132;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(sms) * 8);
  transpose_values<T><<<unsigned(blocks), 256, 0, s>>>(static_cast<const T *>(p->values),
                                                      static_cast<T *>(out), p->a, p->b, p->c,
                                                      p->d);
}

// The factor as its a dense diagonal blocks, (a, b·d, c·d) contiguous, zeros off each block's
// j == j' support (the "block_dense" algorithm's GEMM operand): written in order, read gathered.
template <class T>
__global__ void dense_slabs(const T *__restrict__ K, T *__restrict__ Kd, int64_t a, int64_t b,
                            int64_t c, int64_t d) {
  const int64_t n = a * b * c * d * d;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t jp = t % d, r = t / d, l = r % c, kj = r / c, j = kj % d, ik = kj / d;
    Kd[t] = j == jp ? K[(ik * c + l) * d + j] : T(0);
  }
}

template <class T>
void launch_dense_slabs(const kl_ks_problem *p, void *out, cudaStream_t s) {
  const int64_t n = p->a * p->b * p->c * p->d * p->d;
  DeviceInfo dev;
  const int sms = query_device(&dev) == cudaSuccess ? dev.sms : 132;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(sms) * 8);
  dense_slabs<T><<<unsigned(blocks), 256, 0, s>>>(static_cast<const T *>(p->values),
                                                  static_cast<T *>(out), p->a, p->b, p->c, p->d);
}

// A stream-ordered pool per device for the transposed factors (kept up to 256 MB between calls,
// so that a steady stream of calls does not allocate).
inline cudaError_t values_pool(cudaMemPool_t *out) {
  static std::mutex mu;
  static cudaMemPool_t pools[64] = {};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(mu);
  if (!pools[dev]) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if ((e = cudaMemPoolCreate(&pools[dev], &props)) != cudaSuccess) return e;
    uint64_t keep = uint64_t(256) << 20;
    cudaMemPoolSetAttribute(pools[dev], cudaMemPoolAttrReleaseThreshold, &keep);
  }
  *out = pools[dev];
  return cudaSuccess;
}

// Transposing K once per call pays for runs of 8 j's on long j ranges, where each block's K tile
// is a gather of d-strided values that blocks would otherwise repeat once per batch tile: on an
// H100 (batch 25088, 120 generator patterns) 1.10x median for float32 batch_first at d = 16,
// 1.2x at d >= 24, 1.06-1.12x for the half types at d >= 24 (both layouts); it costs 3-17 % on
// float32 batch_last, on half types at d <= 8 and batch_last at d = 16, and on small products,
// where the extra launch (~3-5 us) shows: taken from 2·B·a·b·c·d >= 6 GFLOP (28 GFLOP for the
// half types batch_first at d = 16).  The half types' runs of 4 j (d = 12 on an H100, second
// session of 2026-11-25, benchmarks/ks_env_ab.py KRONLINALG_KS_KT): see below.
// KRONLINALG_KS_KT=0 never takes it, =1 always (TJ = 8 shapes, and TJ = 4 ones for the half
// types; read per call so that tests can switch it).  The whole-d span shapes (d = 2, 3, 4, 6)
// were tried with it and lose: 0.81-0.98x median per dtype, layout and d on an
// H100 (1.09x only for bfloat16 batch_first d = 3 from 6 GFLOP), so they keep K in registers.
inline bool transposed_values_pay(const kl_ks_problem *p, bool half) {
  if (kl::knob_set("KRONLINALG_KS_KT")) return kl::knob_int("KRONLINALG_KS_KT", 0) == 1;
  const bool first = p->layout == KL_KS_BATCH_FIRST;
  const double flops = 2.0 * double(p->batch) * double(p->a * p->b) * double(p->c * p->d);
  // runs of 4 j (half types, d = 12, 20, ...): 1.03-1.11x batch_last from 9 GFLOP and
  // batch_first from 30 (0.98-1.02x below; float32 0.92-0.94x batch_first: no such shape)
  if (p->d % 8 != 0) return half && flops >= (first ? 30e9 : 9e9);
  // (half types batch_first at d = 16: 1.04-1.13x from 28 GFLOP, 0.97-1.03x below)
  if (half && first && p->d == 16) return flops >= 28e9;
  if (!(half ? p->d >= 24 : first && p->d >= 16)) return false;
  return flops >= 6e9;
}

// A shape of the pipelined kernel: mma.sync (K transposed first where that pays), or WG.
template <class T, bool BF, bool DJ, bool SPAN, int TJ, int BN, int BK, int TL, int NT = kThreads,
          bool WG = false>
int launch_pipe_shape(const kl_ks_problem *p, cudaStream_t s) {
  if (probed(BN, BK, TL, TJ, WG ? KL_KS_TILE_WGMMA : KL_KS_TILE_PIPE)) return KL_OK;
  Params q = make_params(p, BN, BK, TJ);
  constexpr int smem = PipeShape<TJ, BN, BK, TL, BF, NT, int(sizeof(T)), WG>::smem_bytes();
  if constexpr (WG) {
    return launch_checked(q, ks_pipe<T, BF, DJ, SPAN, TJ, BN, BK, TL, NT, false, true>, smem, s, NT);
  } else {
    if constexpr (DJ && (TJ == 8 || (TJ == 4 && !SPAN && sizeof(T) == 2))) {
      cudaMemPool_t pool;
      void *kt = nullptr;
      const int64_t n = p->a * p->b * p->c * p->d;
      if (transposed_values_pay(p, sizeof(T) == 2) && values_pool(&pool) == cudaSuccess &&
          cudaMallocFromPoolAsync(&kt, size_t(n) * sizeof(T), pool, s) == cudaSuccess) {
        launch_transpose<T>(p, kt, s);
        q.K = kt;
        const int rc =
            launch_checked(q, ks_pipe<T, BF, DJ, SPAN, TJ, BN, BK, TL, NT, true>, smem, s, NT);
        cudaFreeAsync(kt, s);
        return rc;
      }
      cudaGetLastError();  // (a failed pool allocation: the kernel that transposes K tiles itself)
    }
    return launch_checked(q, ks_pipe<T, BF, DJ, SPAN, TJ, BN, BK, TL, NT>, smem, s, NT);
  }
}

// Wide tiles for the half types: 16 warps (12 for d = 6) in one block per SM instead of two
// blocks of 8 (6), each j's tile twice as large.  Per flop, the L2 -> SM traffic (X re-read once
// per k tile, K once per batch tile: ∝ 1/BN + 1/BK) and the shared stores that transpose the
// register-loaded operands fall by a third; the registers and warps per SM stay the same, but
// one block's epilogue and barriers no longer overlap another's main loop.  On an H100 (batch
// 25088, 120 generator patterns) that pays for the operands loaded through registers on large
// blocks (b·c >= 128²): runs of 8 j 1.1-1.66x batch_first, runs of 4 j 1.03-1.23x, whole-d
// spans 1.05-1.17x batch_first; it costs 5-30 % on d = 1 and d = 4, on small blocks and on the
// spans batch_last, which keep the 8-warp shapes; d = 3 is faster still with narrow tiles and l
// chunks of 32 (1.13x).  Taken only where the grid still gives every
// SM two tiles; KRONLINALG_KS_TILES=narrow keeps the 8-warp shapes (comparisons).
inline bool wide_enabled() {
  static const bool on = [] {
    return !kl::knob_is("KRONLINALG_KS_TILES", "narrow");
  }();
  return on;
}

inline bool wide_pays(const kl_ks_problem *p) {
  const int64_t d = p->d, bc = p->b * p->c;
  const bool first = p->layout == KL_KS_BATCH_FIRST;
  if (d % 8 == 0) return first || bc >= 128 * 128;
  if (d % 4 == 0 && d != 4) return bc >= 128 * 128;
  if (d == 2 || d == 6) return first && bc >= 2 * 128 * 128;
  return false;
}

inline bool fills_device(const kl_ks_problem *p, int BN, int BK, int TJ) {
  DeviceInfo dev;
  if (const TileProbe *pr = g_tile_probe) dev.sms = pr->units;
  else if (query_device(&dev) != cudaSuccess) return false;
  const int64_t blocks =
      p->a * ((p->d + TJ - 1) / TJ) * ((p->batch + BN - 1) / BN) * ((p->b + BK - 1) / BK);
  return blocks >= 2 * int64_t(dev.sms);
}

template <class T, bool BF, bool DJ, bool SPAN, int TJ, int BN, int BK, int TL, int NT>
bool try_wide(const kl_ks_problem *p, cudaStream_t s, int *rc) {
  if (!fills_device(p, BN, BK, TJ)) return false;
  *rc = launch_pipe_shape<T, BF, DJ, SPAN, TJ, BN, BK, TL, NT>(p, s);
  return true;
}

// The wide shape of a pattern (the narrow one's TL and TJ), false where none is taken.
template <class T, bool BF>
bool launch_pipe_wide(const kl_ks_problem *p, cudaStream_t s, int *rc) {
  if (!wide_enabled() || !wide_pays(p)) return false;
  const int64_t d = p->d;
  if (d == 2) return try_wide<T, BF, true, true, 2, 128, 128, 32, 512>(p, s, rc);
  if (d == 6) return try_wide<T, BF, true, true, 6, 64, 64, 16, 384>(p, s, rc);
  if (d % 8 == 0) return try_wide<T, BF, true, false, 8, 64, 64, 16, 512>(p, s, rc);
  return try_wide<T, BF, true, false, 4, 128, 64, 16, 512>(p, s, rc);  // d % 4 == 0
}

// Warpgroup MMAs (wgmma) for the half types batch_first, where the build has sm_90a code and the
// device is an sm_90: a warpgroup per (j, 64 rows n) and N = 128 columns k (64 for d = 6, whose 24
// warps leave 80 registers per thread), operands in swizzled rows (64 l for d = 1, by cp.async; 32
// for the spans, fed by the same register loaders as the mma.sync shapes), one chunk's MMAs left
// running while the next is multiplied where the ring is small (d = 1, 2).  On an H100 (batch
// 25088, the 120 generator patterns, kernel alone against the mma.sync shapes in one run): d = 1
// 1.16x median where b > 64 (1.03-1.26x), d = 2 1.16x, d = 4 1.0-1.1x where b >= 96, c >= 128 and
// the k tiles pad b little, d = 6 1.0-1.1x from c = 64; below those sizes (a 128-wide k tile on b
// <= 64, two or three l chunks) 0.5-0.95x; d = 3 (0.87-1.04x), runs of 4 j for d % 4 == 0 (in place
// of the wide runs of 8: 0.4-0.8x) and runs of 8 j with two j per warpgroup (N = 64: 0.71-0.95x)
// were tried and have no wgmma shape.  Large tiles are what the operands' j-interleaving denies: a
// block covers the d j's of a span, so each j's tile stays at 64 x 64-128 and the L2 -> SM traffic
// per flop bounds these shapes, not the MMA instruction. KRONLINALG_KS_WGMMA=0 never takes them, =1
// wherever a shape exists (d = 1, 2, 4, 6) (read per call, for tests and comparisons).
inline bool wgmma_runs_here() {
#if defined(KL_WGMMA_BUILT)
  if (const TileProbe *pr = g_tile_probe) return pr->wgmma;
  DeviceInfo dev;
  return query_device(&dev) == cudaSuccess && dev.cc_major == 9 && dev.cc_minor == 0;
#else
  return false;
#endif
}

inline bool wgmma_wanted(const kl_ks_problem *p) {
  if (p->layout != KL_KS_BATCH_FIRST || !wgmma_runs_here()) return false;
  if (kl::knob_set("KRONLINALG_KS_WGMMA")) return kl::knob_int("KRONLINALG_KS_WGMMA", 0) == 1;
  const int64_t b = p->b, c = p->c, d = p->d;
  if (d == 1 || d == 2) return b > 64;
  if (d == 4) return b >= 96 && c >= 128 && (b % 128 == 0 || b % 128 > 64);  // (b = 192: 0.82x)
  if (d == 6) return c >= 64;
  return false;
}

template <class T>
bool launch_pipe_wgmma(const kl_ks_problem *p, cudaStream_t s, int *rc) {
  if (!wgmma_wanted(p)) return false;
  const int64_t d = p->d;
  if (d == 1) *rc = launch_pipe_shape<T, true, false, false, 1, 128, 128, 64, 256, true>(p, s);
  else if (d == 2) *rc = launch_pipe_shape<T, true, true, true, 2, 128, 128, 32, 512, true>(p, s);
  else if (d == 4) *rc = launch_pipe_shape<T, true, true, true, 4, 64, 128, 32, 512, true>(p, s);
  else if (d == 6) *rc = launch_pipe_shape<T, true, true, true, 6, 64, 64, 32, 768, true>(p, s);
  else return false;
  return true;
}

// The natural-layout kernel (ks_cuda_natural.cuh) for the half types batch_first: d = 3, and d = 2
// with b·c <= 128².  On an H100 (batch 25088, the 120 generator patterns, kernel alone in one
// run against the pipelined shapes): d = 3 1.0-1.16x (median 1.07x), d = 2 1.09-1.13x up to b·c
// = 128², 0.90-0.98x above (where the 128-row wgmma and wide shapes take over); d = 4 and 6 lost
// (medians 0.76-0.97x, 64-row blocks of 16 warps of 16 x 16 rows n x outputs k, or for d = 4 of
// 8 warps of 16 x 32, all d j's each: every warp picks its j out of the
// rows it reads, so the permutes repeat once per warp that shares an operand, where the
// pipelined kernel permutes each element once on its way into shared memory) and have no shape.
// KRONLINALG_KS_NATURAL=0 never takes it, =1 wherever a shape exists (d = 2, 3; read per call,
// for tests and comparisons).
inline bool natural_wanted(const kl_ks_problem *p) {
  const int64_t d = p->d;
  if (p->layout != KL_KS_BATCH_FIRST || !(d == 2 || d == 3)) return false;
  if (kl::knob_set("KRONLINALG_KS_NATURAL")) return kl::knob_int("KRONLINALG_KS_NATURAL", 0) == 1;
  return d == 3 || p->b * p->c <= 128 * 128;
}

template <class T, int D, int MI, int NI, int WN, int WK, int TL, int NS, int MINB>
int launch_natural_shape(const kl_ks_problem *p, cudaStream_t s) {
  typedef NaturalShape<D, MI, NI, WN, WK, TL, NS> S;
  if (probed(S::BN, S::BK, TL, D, KL_KS_TILE_NATURAL)) return KL_OK;
  const Params q = make_params(p, S::BN, S::BK, D);
  return launch_checked(q, ks_natural<T, D, MI, NI, WN, WK, TL, NS, MINB>, S::smem_bytes(), s,
                        S::NT);
}

// d = 2: 8 warps of 32 x 32 (128 x 64 tiles), d = 3: 8 warps of 16 x 32 (64 x 64); l chunks of
// 32, 3 stages, two blocks per SM.
template <class T>
bool launch_natural(const kl_ks_problem *p, cudaStream_t s, int *rc) {
  if (!natural_wanted(p)) return false;
  *rc = p->d == 2 ? launch_natural_shape<T, 2, 2, 4, 4, 2, 32, 3, 2>(p, s)
                  : launch_natural_shape<T, 3, 1, 4, 4, 2, 32, 3, 2>(p, s);
  return true;
}

// The pipelined kernel's shape.  d = 1: the k tile that pads b least (128 on a tie: fewer
// re-reads of the X tile).  d = 2, 3, 4, 6: whole-d tiles loaded as contiguous (l, j) spans
// (6 warps for d = 3, 6).  Else TJ the largest of 8, 4, 2, 1 dividing d: runs of TJ j's are
// aligned vectors.  l chunks: 32 / 16 for half types (64 for d = 1, 32 for d = 3), 16 / 8 for
// float32 (twice the bytes).
template <class T, bool BF>
int launch_pipe(const kl_ks_problem *p, cudaStream_t s) {
  if constexpr (sizeof(T) == 2) {
    int rc = KL_OK;
    if (BF && launch_natural<T>(p, s, &rc)) return rc;
    if (BF && launch_pipe_wgmma<T>(p, s, &rc)) return rc;
    if (launch_pipe_wide<T, BF>(p, s, &rc)) return rc;
  }
  constexpr int L2 = sizeof(T) == 2 ? 32 : 16, L1 = L2 / 2;
  const int64_t d = p->d, b = p->b;
  if (d == 1) {  // half types: l chunks of 64 (1.0-1.2x over 32 on an H100: half the barriers)
    constexpr int TL1 = sizeof(T) == 2 ? 64 : L2;
    const int64_t pad128 = (b + 127) / 128 * 128 - b, pad64 = (b + 63) / 64 * 64 - b;
    // float32 on small slabs (b·c <= 384·512), batch_last or b > 64: 4-warp 128 x 64 tiles, twice
    // the blocks of the 8-warp shapes (on an H100, batch 25088: 1.1-1.3x for b = 48-384 and
    // c = 48-512 batch_last, 1.17-1.22x batch_first from b = 96; 3 % slower batch_first with
    // b <= 64, where 256 x 64 tiles already pad nothing; 5-7 % slower from b·c = 512²)
    if constexpr (sizeof(T) == 4) {  // (no half-type instantiation of the shape)
      if (b * p->c <= 384 * 512 && (!BF || b > 64))
        return launch_pipe_shape<T, BF, false, false, 1, 128, 64, TL1, 128>(p, s);
    }
    return pad64 < pad128 ? launch_pipe_shape<T, BF, false, false, 1, 256, 64, TL1>(p, s)
                          : launch_pipe_shape<T, BF, false, false, 1, 128, 128, TL1>(p, s);
  }
  if (d == 2) return launch_pipe_shape<T, BF, true, true, 2, 128, 64, sizeof(T) == 2 ? L2 : L1>(p, s);
  if (d == 3)  // half types: l chunks of 32 (1.13x over 16 and over the wide tiles on an H100)
    return launch_pipe_shape<T, BF, true, true, 3, 64, 64, sizeof(T) == 2 ? L2 : L1, 192>(p, s);
  if (d == 6) return launch_pipe_shape<T, BF, true, true, 6, 64, 32, L1, 192>(p, s);
  if (d == 4) return launch_pipe_shape<T, BF, true, true, 4, 64, 64, L1>(p, s);
  if (d % 8 == 0) return launch_pipe_shape<T, BF, true, false, 8, 64, 32, L1>(p, s);
  if (d % 4 == 0) return launch_pipe_shape<T, BF, true, false, 4, 64, 64, L1>(p, s);
  if (d % 2 == 0) return launch_pipe_shape<T, BF, true, false, 2, 128, 64, sizeof(T) == 2 ? L2 : L1>(p, s);
  return launch_pipe_shape<T, BF, true, false, 1, 128, 128, L1>(p, s);
}

// The pipelined kernel's alignment requirements: x and K 16-byte aligned, rows of x and of K's
// slabs starting on 16-byte boundaries.
inline bool pipe_applies(const kl_ks_problem *p) {
  const auto aligned = [](const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  return aligned(p->x) && aligned(p->values) && p->x_ld % 8 == 0 && p->c % 8 == 0;
}

// Half types: the pipelined kernel where its alignment holds, else 8192 outputs per block, one
// (TK, TN) per TJ.
template <class T>
int launch_half(const kl_ks_problem *p, cudaStream_t s) {
  if (pipe_applies(p))
    return p->layout == KL_KS_BATCH_FIRST ? launch_pipe<T, true>(p, s) : launch_pipe<T, false>(p, s);
  const int tj = pick_tj(p->d);
  const bool bf = p->layout == KL_KS_BATCH_FIRST;
#define KL_KS_HALF(TJ_, TK_, TN_)                                                   \
  if (tj == TJ_) {                                                                   \
    if (probed(TN_, TK_, MmaShape<TN_, TK_, TJ_>::TL, TJ_, KL_KS_TILE_SIMPLE)) return KL_OK; \
    const Params q = make_params(p, TN_, TK_, TJ_);                                  \
    const int smem = MmaShape<TN_, TK_, TJ_>::smem_bytes();                          \
    return bf ? launch_checked(q, ks_mma<T, TN_, TK_, TJ_, true>, smem, s)           \
              : launch_checked(q, ks_mma<T, TN_, TK_, TJ_, false>, smem, s);         \
  }
  KL_KS_HALF(1, 64, 128)
  KL_KS_HALF(2, 32, 128)
  KL_KS_HALF(4, 16, 128)
  KL_KS_HALF(8, 16, 64)
  KL_KS_HALF(16, 16, 32)
#undef KL_KS_HALF
  return fail(KL_ERR_INVALID, "ks_matmul_cuda: no tile shape for this pattern");
}

int launch_f16(const kl_ks_problem *p, cudaStream_t s);
int launch_bf16(const kl_ks_problem *p, cudaStream_t s);

}  // namespace ks
}  // namespace kl

#endif
