// Host side of the CUDA kron_matmul: the planner (which factors share a memory pass, which compiled
// kernel and tile each pass uses) and the launches.  The kernels are in kron_cuda_ffma.cuh (CUDA
// cores: float32, float64, half fallback), kron_cuda_mma.cuh (tensor cores: float16, bfloat16),
// kron_cuda_tf32.cuh (tensor cores: float32 as 3xTF32) and kron_cuda_natural.cuh (float32 as
// 3xTF32 on row-contiguous x with P x P factors: tiles in the tensor's own order, see
// configure_natural) and kron_cuda_natural_mma.cuh (the same for float64 on DMMA and the half
// types); the tables of compiled configurations in kron_cuda_{f32,f64,f16,bf16}.cu,
// kron_cuda_f32_natural.cu and kron_cuda_mma_natural.cu.
//
// choose_config() in a sentence: group consecutive factors (from the last) into as few passes as
// fit on chip — a pass is feasible when its tile of L lines, transformed in place step after step,
// fits the shared memory and (CUDA-core kernel) the register tiles of one block — spread the
// factors evenly over that many passes, then give each pass the largest tile that still leaves
// work for every SM.  kl_kron_cuda_config() prints the choice.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_device.hpp"
#include "fp32_mode.hpp"
#include "knobs.hpp"
#include "kron.h"
#include "kron_cuda_common.cuh"
#include "kron_cuda_kernels.cuh"

namespace kl {
namespace cu {
namespace {

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("kron_matmul_cuda: ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

using DeviceInfo = kl::DeviceInfo;
std::mutex g_mutex, g_occ_mutex, g_plan_mutex;

int device_info(DeviceInfo *out) {
  const cudaError_t e = query_device(out);
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "device attributes");
}

// Overrides for tuning sweeps (0 / -1 = the planner's own choice).
struct Tuning {
  int L = 0, tile_q = 0, threads = 0, budget_kb = 0, kind = -1;
};
Tuning g_tune;

// float32 mode (kl_kron_float32_mode): 3xTF32 tensor cores where every P % 8 == 0, or IEEE FMAs
// on CUDA cores; KRONLINALG_KRON_FP32=ffma makes IEEE the default.
Fp32Mode g_fp32("KRONLINALG_KRON_FP32");
static_assert(Fp32Mode::kTf32x3 == KL_KRON_FP32_TF32X3 && Fp32Mode::kIeee == KL_KRON_FP32_IEEE,
              "one numbering");
int fp32_mode() { return g_fp32.get(); }

// The 3xTF32 kernel: tensor cores on 4-byte elements (4 per 16-byte chunk).
bool is_tf32(const KernelDesc *k) { return k->kind == kMma && k->elem_bytes == 4; }

const KernelDesc *kernel_table(int dtype, int *n) {
  switch (dtype) {
    case KL_FLOAT32: return kernels_f32(n);
    case KL_FLOAT64: return kernels_f64(n);
    case KL_FLOAT16: return kernels_f16(n);
    case KL_BFLOAT16: return kernels_bf16(n);
    default: *n = 0; return nullptr;
  }
}

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

struct StepGeo {
  int P, Q, Qpad, R, ld, f_off, f_ld, f_lo;
};

// 3xTF32: the factors are stored split (hi and lo) while both fit this many bytes, else as
// they are and split per use (a large factor would otherwise crowd out the data buffers).
constexpr int64_t kTf32PresplitBytes = 48 * 1024;
// 3xTF32 for groups whose factors all have at least this many columns (see pick_kernel).
constexpr int kTf32MinQ = 16;

// Where a pass's lines sit: rows (m1 x m2n, two levels) x instances S, which direction is
// adjacent in memory, and how long a run of adjacent lines can be.
struct PassShape {
  int last = 0, count = 0;  // factors [last - count + 1, last], applied last first
  int64_t rows = 0, m2n = 1, S = 1;
  int rows_fast = 0;        // consecutive lines are consecutive rows (else instances)
  int64_t run_cap = 1;      // adjacent lines available along the fast direction
  bool line_outputs_contig = false;  // a line's results are contiguous (full sectors anyway)
  int64_t O = 1, I = 1;     // natural order: modes before / after the group (sizes)
  bool natural = false;     // the plan keeps every intermediate in the final index order
};

struct PassCfg {
  int last = 0, count = 0;  // factors [last - count + 1, last], applied last first
  PassShape sh;
  const KernelDesc *k = nullptr;
  int L = 0, TM = 0, C = 0, NT = 0, TQ = 0, nqt = 1;
  int64_t S = 0, ntiles = 0;
  int Bin = 0, Bout = 0, fs_elems = 0, buf_elems = 0;
  size_t smem = 0;
  int grid = 0, occ = 0;
  int pf = 0;  // tensor cores: third buffer for the next tile (lines adjacent in x)
  StepGeo st[kMaxSteps];
  const NatKernelDesc *nk = nullptr;  // the natural-order kernel (then k is unused)
  int nat_T = 0, nat_buf = 0, nat_stages = 2;
};

struct Plan {
  std::vector<PassCfg> passes;
  int natural = 0;             // every pass writes in the final index order (contiguous data)
  int rows_fast = 0;           // lines run along rows (rows are adjacent in memory)
  int64_t scratch_elems = 0;  // per scratch buffer
  int nscratch = 0;
};

// Geometry of a group for a tile of L lines: shared-memory pitches, factor area, buffer size.
// Returns false if some per-step constraint fails (register tiles of one block, tile sizes).
bool group_geometry(const kl_kron_problem *p, int last, int count, const KernelDesc *k, int L,
                    int TQ, PassCfg *c) {
  // (3xTF32: rows 8 floats mod 32 apart, so that the A loads of 4 consecutive p are
  // conflict-free; see kron_cuda_tf32.cuh)
  const bool tf32 = is_tf32(k);
  const int es = k->elem_bytes, V = 16 / es, padc = es == 8 || tf32 ? 2 : 1;
  int64_t bin = 1, bout = 1;
  for (int s = 0; s < count; ++s) {
    bin *= p->P[last - s];
    bout *= p->Q[last - s];
  }
  if (bin > (1 << 24) || bout > (1 << 24) || int64_t(L) * std::max(bin, bout) > (1 << 28))
    return false;
  c->Bin = int(bin);
  c->Bout = int(bout);
  bool presplit = false;
  if (tf32) {
    int64_t area = 0;
    for (int s = 0; s < count; ++s)
      area += round_up(p->Q[last - s], k->tile_q) * (p->P[last - s] + 4);
    presplit = 2 * area * es <= kTf32PresplitBytes;
  }
  int64_t lin = bin, fs = 0, buf = 0;
  for (int s = 0; s < count; ++s) {
    StepGeo &g = c->st[s];
    g.P = int(p->P[last - s]);
    g.Q = int(p->Q[last - s]);
    g.R = int(lin / g.P);
    if (k->kind == kFfma) {
      g.Qpad = TQ > 0 ? TQ : int(round_up(g.Q, k->tile_q));
      g.f_ld = g.Qpad;
    } else {
      g.Qpad = int(round_up(g.Q, k->tile_q));
      g.f_ld = g.P + (tf32 ? 4 : 8);  // 16 bytes of padding: ldmatrix rows in 8 bank groups
    }
    const int64_t nch = int64_t(g.R) * L / V;
    const int64_t ldc = nch <= 8 ? nch + (((padc - nch) % 8) + 8) % 8 : round_up(nch, 8) + padc;
    if (ldc * V > (1 << 24)) return false;
    g.ld = int(ldc * V);
    g.f_off = int(fs);
    g.f_lo = presplit ? g.Qpad * g.f_ld : 0;  // 3xTF32: the lo part after the hi part
    fs += round_up(int64_t(k->kind == kFfma ? g.P : g.Qpad) * g.f_ld * (presplit ? 2 : 1), 8);
    buf = std::max<int64_t>(buf, int64_t(g.P) * g.ld);
    if (k->kind == kFfma && s + 1 < count) {
      // the in-place step needs every register tile of the step in one block
      const int64_t items = nch * (g.Qpad / k->tile_q);
      if (items > k->max_threads) return false;
    }
    lin = lin / g.P * g.Q;
  }
  if (k->kind == kMma) {  // staging of the last step: [k][line]
    const int64_t nch = int64_t(bout) * L / V;
    buf = std::max<int64_t>(buf, (nch <= 8 ? nch : round_up(nch, 8)) * V);
  }
  c->fs_elems = int(round_up(fs, 8));
  c->buf_elems = int(round_up(buf, 8));
  // line tables: two sets of x and y offsets (CUDA cores), or one set plus one entry per
  // chunk of 8 lines (tensor cores; two sets and a third data buffer when prefetching)
  const int nbuf = c->pf ? 3 : 2;
  const size_t tables = k->kind == kFfma ? size_t(32) * L : size_t(c->pf ? 2 : 1) * 18 * L;
  c->smem = size_t(c->fs_elems + nbuf * int64_t(c->buf_elems)) * es + tables;
  return true;
}

int pow2_divisor(int64_t v, int cap) {
  int a = 1;
  while (a < cap && v % (2 * a) == 0) a *= 2;
  return a;
}

// The kernel of a group: tensor cores for half types, and for float32 in 3xTF32 mode, when every
// P is a multiple of 8, else CUDA cores; the narrowest compiled column tile that covers the
// widest factor.
const KernelDesc *pick_kernel(const kl_kron_problem *p, int dtype, int last, int count,
                              bool allow_tf32 = true) {
  int n = 0;
  const KernelDesc *tab = kernel_table(dtype, &n);
  int maxq = 1, minq = 1 << 30;
  bool p8 = true;
  for (int s = 0; s < count; ++s) {
    maxq = std::max<int>(maxq, int(p->Q[last - s]));
    minq = std::min<int>(minq, int(p->Q[last - s]));
    p8 = p8 && p->P[last - s] % 8 == 0;
  }
  const bool half = dtype == KL_FLOAT16 || dtype == KL_BFLOAT16;
  // (3xTF32 splits each input element once per step and column group, a cost that a CUDA-core
  // register tile of Q <= 8 columns matches: there the CUDA cores are as fast, and exact; H100,
  // 1024 x 8^6: 2.4 ms on CUDA cores, 3.1 on 3xTF32)
  const bool tc = half || (dtype == KL_FLOAT32 && allow_tf32 && fp32_mode() == KL_KRON_FP32_TF32X3 &&
                           (minq >= kTf32MinQ || g_tune.kind == kMma));
  const int want_kind = tc && p8 && g_tune.kind != kFfma ? kMma : kFfma;
  // CUDA cores: 16-column register tiles need ~180 registers, so only 8 warps fit an SM; the
  // in-place steps of a fused pass want the 16 warps of 8-column tiles
  const int want = want_kind == kFfma && count > 1 ? std::min(maxq, 8) : maxq;
  const KernelDesc *fit = nullptr, *widest = nullptr;
  for (int i = 0; i < n; ++i) {
    const KernelDesc *k = &tab[i];
    if (k->kind != want_kind) continue;
    if (g_tune.tile_q > 0 && k->tile_q == g_tune.tile_q) return k;
    if (!widest || k->tile_q > widest->tile_q) widest = k;
    if (k->tile_q >= want && (!fit || k->tile_q < fit->tile_q)) fit = k;
  }
  return fit ? fit : widest;
}

int occupancy(const void *func, int dev, int threads, size_t smem, int *blocks);
int occupancy(const KernelDesc *k, int dev, int threads, size_t smem, int *blocks) {
  return occupancy(k->func, dev, threads, smem, blocks);
}

// The natural-order kernel (kron_cuda_natural.cuh) unless KRONLINALG_KRON_NATURAL=0, and for
// tuning sweeps KRONLINALG_KRON_NATURAL_T (lines per line tile), _TI (i per column tile), _TI_MIN
// (the narrowest column tile, 8 or 4), _WARPS (per block, 4 or 8), _SHORTER (see
// natural_takes_shorter: unset the half types, 1 float64 too, 0 none), _STAGES (load buffers, 2
// or 3), _RING (0: no ring kernel) and _RING_TI (16 or 32: column groups that fit the other
// kernel take the ring kernel with tiles of that many i; 0: only those that do not fit; unset:
// 32 for P = 32, see configure_natural), _RING_HALF (the half types' ring kernel: 0 none, 1
// groups that fit no other tile, 2 also P = 32 column groups on tiles of 64 i, or of _RING_TI
// i where set, 3 P = 16 ones too); read when a plan is made, part of the plan cache's key.
struct NatTune {
  int on = 1, T = 0, TI = 0, ti_min = 8, warps = 0, shorter = -1, stages = 0, ring = 1,
      ring_ti = -1, ring_half = 3;
};
NatTune natural_tune() {
  auto num = [](const char *name) { return kl::knob_int(name, -1); };
  NatTune t;
  t.on = num("KRONLINALG_KRON_NATURAL") != 0;
  t.T = std::max(0, num("KRONLINALG_KRON_NATURAL_T"));
  t.TI = std::max(0, num("KRONLINALG_KRON_NATURAL_TI"));
  t.ti_min = num("KRONLINALG_KRON_NATURAL_TI_MIN") == 4 ? 4 : 8;
  const int sh = num("KRONLINALG_KRON_NATURAL_SHORTER");
  t.shorter = sh == 0 || sh == 1 ? sh : -1;
  const int w = num("KRONLINALG_KRON_NATURAL_WARPS");
  t.warps = w == 4 || w == 8 ? w : 0;
  const int st = num("KRONLINALG_KRON_NATURAL_STAGES");
  t.stages = st == 2 || st == 3 ? st : 0;
  t.ring = num("KRONLINALG_KRON_NATURAL_RING") != 0;
  const int rti = num("KRONLINALG_KRON_NATURAL_RING_TI");
  t.ring_ti = rti == 0 || rti == 16 || rti == 32 ? rti : -1;
  const int rh = num("KRONLINALG_KRON_NATURAL_RING_HALF");
  t.ring_half = rh >= 0 && rh <= 3 ? rh : 3;
  return t;
}

// The PassCfg of a natural-order pass: tiles of T lines or T i, `stages` load buffers (the ring
// kernel: slots), buffers of T * bin elements.
PassCfg natural_pass(const PassShape &sh, const NatKernelDesc *k, int64_t T, int64_t bin,
                     int stages, int threads, size_t smem, int blocks, int64_t ntiles) {
  PassCfg c;
  c.last = sh.last;
  c.count = sh.count;
  c.sh = sh;
  c.nk = k;
  c.nat_T = int(T);
  c.nat_buf = int(T * bin);
  c.nat_stages = stages;
  c.L = int(T);
  c.NT = threads;
  c.Bin = int(bin);
  c.Bout = int(bin);
  c.smem = smem;
  c.occ = blocks;
  c.ntiles = ntiles;
  return c;
}

// The ring form of the natural-order kernel for a group whose smallest tile (one line, or 8 i)
// does not fit two load buffers: it streams the tile through a ring of slice slots
// (kron_cuda_natural_ring.cuh; the half types' kron_cuda_natural_mma_ring.cuh).  False where
// the smallest tile fits twice (the other kernel then takes it) or the ring does not fit P slots.
// (force_ti: column tiles of that many i, whether or not they fit the other kernel; a knob.
// The half types call it where the other kernel has no tile: any_fit, column tiles of min_ti i)
bool configure_natural_ring(const kl_kron_problem *p, int dtype, const DeviceInfo &dev,
                            const PassShape &sh, int64_t bin, int64_t fs, int force_ti,
                            PassCfg *out, bool any_fit = false, int min_ti = 8) {
  const int P = int(p->P[sh.last]);
  const NatKernelDesc *rk = dtype == KL_FLOAT16    ? nat_ring_kernel_f16(P)
                            : dtype == KL_BFLOAT16 ? nat_ring_kernel_bf16(P)
                                                   : nat_ring_kernel_f32(P);
  const bool line = sh.I == 1;
  const int64_t T = line ? 1 : force_ti ? force_ti : min_ti;
  if (!rk || (!line && sh.I % T)) return false;
  const int64_t es = rk->elem_bytes;
  const int64_t buf = T * bin, slice = buf / P;
  if (!force_ti && !any_fit && size_t(fs + 2 * buf) * es <= size_t(dev.smem_optin)) return false;
  // (a slice is whole warp items of every first step; a row's 16-byte copies (T / 4 float32,
  // T / 8 half) within one warp's 32 lanes, which load a slice)
  if (slice % (32 * P) || T * es / 16 > 32) return false;
  const int64_t slots =
      std::min<int64_t>(2 * P, (int64_t(dev.smem_optin) - fs * es) / (slice * es + 8));
  if (slots < P) return false;
  const size_t smem = size_t(fs * es + slots * (slice * es + 8));
  int blocks = 0;
  if (occupancy(rk->func, dev.id, rk->max_threads, smem, &blocks) != KL_OK || blocks < 1)
    return false;
  *out = natural_pass(sh, rk, T, bin, int(slots), rk->max_threads, smem, blocks,
                      line ? sh.rows : (sh.rows / sh.I) * (sh.I / T));
  return true;
}

// The natural-order kernel of a dtype for P x P factors: float32 in 3xTF32 mode, float64 on
// DMMA (sm_90 and newer), the half types; nullptr where none applies.
const NatKernelDesc *natural_kernel(int dtype, int P, const DeviceInfo &dev) {
  switch (dtype) {
    case KL_FLOAT32: return fp32_mode() == KL_KRON_FP32_TF32X3 ? nat_kernel_f32(P) : nullptr;
    case KL_FLOAT64: return dev.cc_major >= 9 ? nat_kernel_f64(P) : nullptr;
    case KL_FLOAT16: return nat_kernel_f16(P);
    case KL_BFLOAT16: return nat_kernel_bf16(P);
    default: return nullptr;
  }
}

// A pass of the natural plan on the natural-order kernel of its dtype (natural_kernel): up to
// kNatMaxSteps factors all P x P with a compiled P, 16-byte aligned x and y; tiles of T lines
// (I == 1) or T consecutive i (I % T == 0) that give each step at least 8 warp items where the
// shape allows.  False where it does not apply or fit (the other kernels then take the pass).
bool configure_natural(const kl_kron_problem *p, int dtype, const DeviceInfo &dev,
                       const PassShape &sh, PassCfg *out) {
  if (!sh.natural || sh.count > kNatMaxSteps || dev.cc_major < 8) return false;
  const NatTune tune = natural_tune();
  if (!tune.on) return false;
  if (g_tune.L || g_tune.tile_q || g_tune.threads || g_tune.budget_kb || g_tune.kind != -1)
    return false;
  if (!aligned16(p->x) || !aligned16(p->y)) return false;
  const int P = int(p->P[sh.last]);
  const NatKernelDesc *nk = natural_kernel(dtype, P, dev);
  if (!nk) return false;
  const int es = nk->elem_bytes;
  if (nk->col_groups > 1 && sh.count > 2) return false;  // a middle step works in place
  // (P = 8: groups of three or more steps only; on the H100 1024 x 8^6, two 3-step passes, took
  // 2.30 ms against the CUDA-core kernel's 2.53, but 1024 x 8^7 (3 + 2 + 2) 25.4 against 21.9)
  // (float64 and the half types: from two steps, their sliced kernels being the slower ones)
  if (P == 8 && sh.count < (dtype == KL_FLOAT32 ? 3 : 2)) return false;
  // (and up to 3: 1024 x 8^7 in 4 + 3 steps took 24.3 ms on the H100 where 3 on this kernel
  // and 2 + 2 on the CUDA cores take 19.8; the 4-step line tiles hold 2 lines of 4096)
  if (P == 8 && sh.count > 3) return false;
  int64_t bin = 1;
  for (int s = 0; s < sh.count; ++s) {
    if (p->P[sh.last - s] != P || p->Q[sh.last - s] != P) return false;
    bin *= P;
  }
  const bool line = sh.I == 1;
  const int64_t rows = sh.rows / sh.I;  // lines, or rows r of the column tiles
  const int64_t fs = int64_t(sh.count) * nk->f_copies * P * P;
  if (dtype == KL_FLOAT32 && tune.ring && nk->col_groups == 1 && sh.count > 1 && tune.ti_min == 8) {
    // P = 32 column groups stream tiles of 32 i through the ring (128-byte runs of x and y,
    // where the other kernel's two buffers hold 8 i, 32-byte runs) where that leaves a few
    // tiles per SM.  (H100, one call, ms, 8-i tiles against 32 in the ring: 1024 x 32^4
    // 7.60-7.72 against 6.35, 16 x 32^5 4.48 against 3.80-3.81; 1024 x 16^5's column pass of
    // 32 i in the ring 6.83-6.90 against 6.62-6.68 in the other kernel)
    const int ring_ti = tune.ring_ti >= 0 ? tune.ring_ti : P == 32 ? 32 : 0;
    if (!line && ring_ti && rows * (sh.I / ring_ti) >= 4 * int64_t(dev.sms) &&
        configure_natural_ring(p, dtype, dev, sh, bin, fs, ring_ti, out))
      return true;
    if (configure_natural_ring(p, dtype, dev, sh, bin, fs, 0, out)) return true;
  }
  // The half types' ring (_RING_HALF): 1 where the other kernel has no tile for the group
  // (3-step P = 32 line groups, 3-step P = 16 column groups: the float32 grouping, 16 x 32^5 in
  // 3 + 2 passes and 16 x 16^6 in 3 + 3, not three passes each); 2 also P = 32 column groups
  // on tiles of 64 i, 128-byte runs, where that leaves a few tiles per SM; 3 (default) P = 16
  // ones too.  (H100, one run, float16 ms, =0 / 1 / 2 / 3: 16 x 16^6 1.81 / 1.24 / 1.24 /
  // 1.23, 16 x 32^5 2.76 / 2.27 / 1.90 / 1.90, 1024 x 32^4 3.89 / 3.88 / 3.25 / 3.28 (tiles of
  // 32 i: 3.45), 1024 x 16^5 4.53 / 4.57 / 4.57 / 4.52; bfloat16 alike)
  const int half_ring =
      es == 2 && tune.ring && nk->col_groups == 1 && sh.count > 1 ? tune.ring_half : 0;
  if (!line && ((half_ring >= 2 && P == 32) || (half_ring >= 3 && P == 16))) {
    const int ti = tune.ring_ti > 0 ? tune.ring_ti : 64;
    if (rows * (sh.I / ti) >= 4 * int64_t(dev.sms) &&
        configure_natural_ring(p, dtype, dev, sh, bin, fs, ti, out))
      return true;
  }
  // (where the other kernel has no tile: the ring's smallest, one line or 16 i)
  auto no_tile = [&] {
    return half_ring >= 1 &&
           configure_natural_ring(p, dtype, dev, sh, bin, fs, 0, out, true, 16);
  };
  // the smallest tile with a warp item (32 rows of A x a column group) per warp of the block
  // (4-warp blocks, more of them per SM, for P = 8, 32, 64; 8 warps for P = 16.  H100,
  // kron_large float32 ms, 8 / 4 warps: 1024 x 32^4 8.14 / 7.57, 1024 x 64^3 2.97 / 2.83,
  // 1024 x 8^6 2.36 / 2.30, but 1024 x 16^5 7.77 / 10.77 and 16 x 16^6 3.13 / 3.98.  float64
  // P = 8: 8 warps, 1024 x 8^6 4.05 -> 3.84 ms, and with column tiles of 16 i below 3.27;
  // float64 P = 32 and 64 in blocks of 8 warps (P = 64 in four column groups) lost or tied,
  // 1024 x 64^3 4.29 against 4.24, 16 x 64^4 6.12 against 5.78)
  const bool f64_p8 = es == 8 && P == 8;
  const int warps =
      std::min(nk->max_threads / 32, tune.warps ? tune.warps : P == 16 || f64_p8 ? 8 : 4);
  // (the half types: column tiles of 16 i at least, whole 32-byte sectors of x and y; on the
  // H100 their first form with 8 i, 16-byte runs, took 1024 x 32^4 in 12.7 ms, float32 6.4)
  const int ti_min = es == 2 ? std::max(16, tune.ti_min) : tune.ti_min;
  const int64_t T0 = std::max<int64_t>(line ? 1 : std::max(8, ti_min),
                                       32 * warps * P / bin / nk->col_groups);
  // (larger tiles where a sweep on the H100 found them faster, kron_large float32 ms: P = 8 line
  // tiles of 4x the lines, 1024 x 8^6 2.31 -> 2.16; P = 16 line tiles of at least 2 lines,
  // 1024 x 16^5 7.29 -> 7.02, and column tiles of 32 i, 8.03 -> 7.59, 16 x 16^6 3.02 -> 2.91;
  // as large, they lost elsewhere.  A third load buffer (KRONLINALG_KRON_NATURAL_STAGES=3) was
  // within noise: 1024 x 32^4 7.66 with two, 7.85-7.98 with three)
  int64_t T = T0;
  if (line && P == 8) T = 4 * T0;
  // (the half types' P = 16 line tiles of 4 lines, float32's bytes a tile: H100, one run,
  // float16 1024 x 16^5 4.59 -> 4.24 ms, 16 x 16^6 1.24 -> 1.16)
  if (line && P == 16) T = std::max<int64_t>(T0, es == 2 ? 4 : 2);
  if (!line && (P == 16 || es == 2)) T = std::max<int64_t>(T0, 32);
  // (float64 P = 8: column tiles of 16 i, 128-byte runs, one 8-warp block an SM; H100, one run:
  // 1024 x 8^6 3.27 ms against 3.84 on tiles of 8 i (4.05 in 4-warp blocks), 16 x 8^8 5.09
  // against 5.44 (5.74))
  if (!line && f64_p8) T = 16;
  const int stages = tune.stages ? tune.stages : 2;
  const bool buf2 = nk->col_groups > 1 && sh.count > 1;  // else every step works in place
  auto smem_of = [&](int64_t t) { return size_t(fs + t * bin * (stages + (buf2 ? 1 : 0))) * es; };
  // two blocks per SM; (but float64 P = 16 column tiles of 32 i, one 8-warp block: on the H100
  // 1024 x 16^5 12.38 ms against 13.25 with two blocks of 16 i, 16 x 16^6 4.69 against 5.12;
  // for P = 32 and 64 larger tiles lost, 1024 x 32^4 17.6 against 15.7)
  const bool one_block = es == 8 && !line && (P == 16 || P == 8);
  while (T > T0 && !one_block && 2 * (smem_of(T) + 1024) > size_t(dev.smem_sm)) T /= 2;
  // (the half types' P = 32 groups of 2 or more on line tiles of 8 lines, where 4 gave each warp
  // one item, and not shrunk: a 3-step group's one-line tile, one block an SM, then does not
  // fit.  H100, one run, bfloat16: 1024 x 32^4 4.09 -> 3.85 ms, 16 x 32^5 2.95 -> 2.81 (2 + 2
  // + 1 passes, not 3 + 2); 8 lines lost for P = 16 and 64, 1024 x 16^5 4.57 -> 4.83, 1024 x
  // 64^3 1.12 -> 1.28)
  if (line && es == 2 && P == 32 && sh.count > 1) T = 8;
  if (line && tune.T > 0) T = tune.T;
  if (!line && tune.TI > 0) T = tune.TI;
  if (!line) {
    // column tiles of 4 i where 8 do not fit twice, opt-in (_TI_MIN=4): 3-step P = 16 groups at
    // 64 KB a tile, 16 x 16^6 in two passes; on the H100 3.44 ms against 2.52 in three (one
    // 8-warp block per SM: its column pass took 2.8 ms at 26-31 % of the DRAM rate)
    if (tune.TI <= 0)
      while (T > ti_min && smem_of(T) > size_t(dev.smem_optin)) T /= 2;
    while (T > ti_min && sh.I % T) T /= 2;
    // (the column views' row lengths T * P^s must be powers of two of 4 or more)
    // (and a tile's row of T / 4 chunks at most one per thread: load_tile steps whole rows)
    if (T < ti_min || (T & (T - 1)) || sh.I % T || (bin / P * T) % 32 || T / 4 > 32 * warps)
      return no_tile();
  } else if (T < 1 || (T * bin / P) % 32) {
    return no_tile();
  }
  const size_t smem = smem_of(T);
  if (smem > size_t(dev.smem_optin)) return no_tile();
  int blocks = 0;
  if (occupancy(nk->func, dev.id, 32 * warps, smem, &blocks) != KL_OK || blocks < 1)
    return no_tile();
  *out = natural_pass(sh, nk, T, bin, stages, 32 * warps, smem, blocks,
                      line ? (rows + T - 1) / T : rows * (sh.I / T));
  return true;
}

// Tile of the pass (L lines = TM rows x C instances) and its configuration; false if none fits.
bool configure_with(const kl_kron_problem *p, const KernelDesc *k, const DeviceInfo &dev,
                    const PassShape &sh, PassCfg *out);

// Whether the natural-order kernel takes this group less its first factor: then the half types
// (and float64 with KRONLINALG_KRON_NATURAL_SHORTER=1; =0 neither) leave the whole group to
// shorter natural passes, not to the sliced kernels.  (H100, one run, 1024 x 8^7: bfloat16
// 30.5 ms in a 4-factor sliced pass + 3 natural steps, 15.6 in 3 + 2 + 2 natural, float16
// 15.4; float32 19.6.  float64 not by default: its third pass needs a second scratch buffer,
// 17 GB there, and 3 + 2 + 2 was not timed.  P = 8 groups on the natural kernel stop at 3)
bool natural_takes_shorter(const kl_kron_problem *p, int dtype, const DeviceInfo &dev,
                           const PassShape &sh) {
  const int on = natural_tune().shorter;
  if (dtype == KL_FLOAT32 || !sh.natural || sh.count < 2 || on == 0 ||
      (dtype == KL_FLOAT64 && on != 1))
    return false;
  const int first = sh.last - sh.count + 1;
  const int64_t P = p->P[sh.last];
  for (int i = first; i <= sh.last; ++i)  // (groups of one P x P only: mixed ones as before)
    if (p->P[i] != P || p->Q[i] != P) return false;
  PassShape shorter = sh;
  shorter.count = sh.count - 1;
  shorter.O = sh.O * p->P[first];  // (the modes before the group: one more)
  shorter.rows = sh.rows * p->P[first];
  PassCfg unused;
  return configure_natural(p, dtype, dev, shorter, &unused);
}

// Tile of the pass (L lines = TM rows x C instances) and its configuration; false if none fits.
// (A single factor that fits no 3xTF32 tile, which has no column tiles, may still fit the CUDA
// cores.  Longer groups do not fall back: more 3xTF32 passes beat fewer CUDA-core ones, e.g.
// 1024 x 64^3 on an H100, 3.8 against 4.4 ms.)
// (The natural-order kernel first, where it applies.)
bool configure_pass(const kl_kron_problem *p, int dtype, const DeviceInfo &dev,
                    const PassShape &sh, PassCfg *out) {
  if (configure_natural(p, dtype, dev, sh, out)) return true;
  if (natural_takes_shorter(p, dtype, dev, sh)) return false;
  const KernelDesc *k = pick_kernel(p, dtype, sh.last, sh.count);
  if (!k) return false;
  if (configure_with(p, k, dev, sh, out)) return true;
  if (!is_tf32(k) || sh.count > 1 || g_tune.kind == kMma) return false;
  return configure_with(p, pick_kernel(p, dtype, sh.last, sh.count, false), dev, sh, out);
}

bool configure_with(const kl_kron_problem *p, const KernelDesc *k, const DeviceInfo &dev,
                    const PassShape &sh, PassCfg *out) {
  const int last = sh.last, count = sh.count, rows_fast = sh.rows_fast;
  const int64_t S = sh.S, M = sh.rows;
  const int V = k->kind == kMma && !is_tf32(k) ? 8 : 16 / k->elem_bytes;
  const int lmult = V;  // a thread's register tile (CUDA cores) / a 16-byte chunk (tensor cores)
  const size_t hard = size_t(dev.smem_optin);
  size_t budget = g_tune.budget_kb > 0 ? std::min(hard, size_t(g_tune.budget_kb) << 10) : hard;
  // float32 groups of factors on CUDA cores: at most half an SM's shared memory, so that two
  // blocks share each SM.  A lone 16-warp block stalls at every step's barrier: 1024 x 8^7 ran
  // in 30.0 ms as 2 passes (a 4-factor group at 132 KB, 1 block per SM) and in 22.1 ms as 3
  // passes of 4 blocks per SM on the H100.  Single factors keep the whole budget (any factor
  // must fit somewhere).
  if (k->kind == kFfma && k->elem_bytes == 4 && k->gmem_bytes == 4 && count > 1 &&
      g_tune.budget_kb <= 0 && dev.smem_sm > 0)
    budget = std::min(budget, size_t(dev.smem_sm / 2 - 1024));
  // q tiles: a single-factor pass whose factor would crowd out the data
  int TQ = 0;
  if (k->kind == kFfma && count == 1) {
    const int P = int(p->P[last]), Q = int(p->Q[last]);
    const int64_t qpad = round_up(Q, k->tile_q);
    const int64_t cap = 64 * 1024 / k->elem_bytes;
    if (int64_t(P) * qpad > cap)
      TQ = int(std::max<int64_t>(k->tile_q, cap / P / k->tile_q * k->tile_q));
  }
  static const int cand[] = {256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 4, 2};
  PassCfg best;
  bool found = false;
  int64_t best_score = -1;
  int prev_tm = -1, prev_c = -1;
  for (int target : cand) {
    if (g_tune.L > 0 && target != g_tune.L) continue;
    if (target % lmult) continue;
    PassCfg c;
    c.last = last;
    c.count = count;
    c.sh = sh;
    c.k = k;
    c.S = S;
    // tensor cores, lines adjacent in x: the next tile's chunks stream in (cp.async) meanwhile
    // (3xTF32: every tile, all its loads are cp.async)
    c.pf = k->kind == kMma && (rows_fast || is_tf32(k));
    // lines: C consecutive instances of TM rows (instances fastest), or the other way round;
    // neither beyond what the matrix has, rounded up to the register tile
    if (!rows_fast) {
      c.C = int(std::min<int64_t>(S, target));
      c.TM = int(std::min<int64_t>(std::max(1, target / c.C), M));
      while ((c.TM * c.C) % lmult) ++c.TM;
    } else {
      c.TM = int(std::min<int64_t>(M, target));
      c.C = int(std::min<int64_t>(std::max(1, target / c.TM), S));
      while ((c.TM * c.C) % lmult) ++c.C;
    }
    if (c.TM == prev_tm && c.C == prev_c) continue;
    prev_tm = c.TM;
    prev_c = c.C;
    c.L = c.TM * c.C;
    if (c.L > 512) continue;
    // results leave in runs of adjacent lines: shorter than a 32-byte sector, each store is a
    // read-modify-write of the sector in DRAM (ECC), so such tiles are not used when avoidable
    if (!sh.line_outputs_contig) {
      const int64_t run = std::min<int64_t>(rows_fast ? c.TM : c.C, sh.run_cap);
      // (prefetching tensor-core passes: 64-byte runs, as each tile's line is read in runs too)
      const int64_t want = ((c.pf && rows_fast ? 64 : 32) + k->gmem_bytes - 1) / k->gmem_bytes;
      if (run < want && sh.run_cap >= want && g_tune.L == 0) continue;
    }
    if (!group_geometry(p, last, count, k, c.L, TQ, &c)) continue;
    if (c.smem > budget) continue;
    c.TQ = TQ > 0 ? TQ : c.st[0].Qpad;
    c.nqt = TQ > 0 ? int((p->Q[last] + TQ - 1) / TQ) : 1;
    c.ntiles = ((M + c.TM - 1) / c.TM) * ((S + c.C - 1) / c.C) * c.nqt;
    // threads: one per register tile of the largest step (the in-place steps need them all)
    int64_t items = 1;
    for (int s = 0; s < c.count; ++s) {
      const StepGeo &g = c.st[s];
      int64_t t;
      if (k->kind == kFfma) {
        t = (int64_t(g.R) * c.L / V) * (g.Qpad / k->tile_q);
      } else {
        const int64_t nmt = (int64_t(g.R) * c.L + 15) / 16;
        t = ((nmt + 1) / 2) * (g.Qpad / k->tile_q) * 32;  // one warp per 32 x tile_q
      }
      items = std::max(items, t);
    }
    // (tensor cores: blocks of up to 256 threads, two per SM where they fit, else one block
    // of up to 512 threads, so that an SM holding a single large tile still has 16 warps)
    const int cap = k->kind == kMma ? std::min(256, k->max_threads) : k->max_threads;
    c.NT = int(std::min<int64_t>(cap, round_up(items, 32)));
    if (g_tune.threads > 0) c.NT = std::max(c.NT, std::min(g_tune.threads, k->max_threads));
    int blocks = 0;
    if (occupancy(k, dev.id, c.NT, c.smem, &blocks) != KL_OK || blocks < 1) continue;
    if (k->kind == kMma && blocks == 1 && items > c.NT && g_tune.threads <= 0) {
      const int nt = int(std::min<int64_t>(k->max_threads, round_up(items, 32)));
      int b2 = 0;
      if (occupancy(k, dev.id, nt, c.smem, &b2) == KL_OK && b2 >= 1) c.NT = nt;
    }
    c.occ = blocks;
    // score: work for every SM, then threads with work per SM (latency hiding), then tile size
    const int64_t grid = std::min<int64_t>(c.ntiles, int64_t(blocks) * dev.sms);
    const int64_t per_sm = (grid + dev.sms - 1) / dev.sms;
    const int64_t busy = std::min<int64_t>(512, per_sm * std::min<int64_t>(items, c.NT));
    // (at equal busy threads, two blocks per SM beat one: one block's barriers overlap the
    // other's work)
    // (tensor cores: a step of fewer than 32 rows per tile leaves most of each warp's 32-row
    // mma tile empty)
    int64_t min_rows = int64_t(1) << 30;
    for (int s = 0; s < c.count; ++s) min_rows = std::min<int64_t>(min_rows, int64_t(c.st[s].R) * c.L);
    const bool full_mma = k->kind != kMma || min_rows >= 32;
    const int64_t score = (c.ntiles >= 2 * dev.sms ? int64_t(1) << 40 : 0) +
                          (full_mma ? int64_t(1) << 39 : 0) + busy * 100000 +
                          std::min(blocks, 4) * 1000 + c.L;
    if (!found || score > best_score) {
      best = c;
      best_score = score;
      found = true;
    }
  }
  if (!found) return false;
  *out = best;
  return true;
}

int64_t prod_range(const int64_t *v, int lo, int hi) {  // v[lo..hi]
  int64_t r = 1;
  for (int i = lo; i <= hi; ++i) r *= v[i];
  return r;
}

// Rows adjacent in memory (the contiguous direction of a transposed x of kron @ x).
int rows_adjacent(int64_t m1, int64_t m2, int64_t rs1, int64_t rs2, int64_t es) {
  if (es == 1) return 0;
  if (m2 > 1) return rs2 == 1;
  return m1 > 1 && rs1 == 1;
}

// x and y row-major with contiguous rows (x @ kron of a C-ordered array): passes can then keep
// every intermediate in the final index order ("natural order": a pass contracts a range of
// modes and leaves the others in place), so the lines of a pass are rows of a 2-level view.
bool natural_layout(const kl_kron_problem *p) {
  const int n = p->nfactors;
  const int64_t K = prod_range(p->P, 0, n - 1), N = prod_range(p->Q, 0, n - 1);
  auto contiguous = [&](int64_t rs1, int64_t rs2, int64_t es, int64_t len) {
    return es == 1 && (p->m2 == 1 || rs2 == len) && (p->m1 == 1 || rs1 == p->m2 * len);
  };
  return contiguous(p->x_rs1, p->x_rs2, p->x_es, K) && contiguous(p->y_rs1, p->y_rs2, p->y_es, N);
}

PassShape pass_shape(const kl_kron_problem *p, const Plan &plan, int last, int count) {
  const int n = p->nfactors;
  PassShape sh;
  sh.last = last;
  sh.count = count;
  const int first = last - count + 1;
  const int64_t M = p->m1 * p->m2;
  sh.natural = plan.natural;
  if (plan.natural) {
    // lines: (row, modes before the group) x (modes after it); the latter adjacent in memory
    sh.O = prod_range(p->P, 0, first - 1);
    sh.I = prod_range(p->Q, last + 1, n - 1);
    sh.rows = M * sh.O * sh.I;
    sh.m2n = sh.I;
    sh.S = 1;
    sh.rows_fast = sh.I > 1;
    sh.run_cap = sh.I;
    sh.line_outputs_contig = sh.I == 1;
  } else {
    const int64_t len_in = prod_range(p->P, 0, last) * prod_range(p->Q, last + 1, n - 1);
    sh.rows = M;
    sh.m2n = p->m2;
    sh.S = len_in / prod_range(p->P, first, last);
    sh.rows_fast = plan.rows_fast;
    sh.run_cap = plan.rows_fast ? p->m2 : sh.S;
    sh.line_outputs_contig = sh.S == 1 && !plan.rows_fast;
  }
  return sh;
}

int make_plan(const kl_kron_problem *p, int dtype, Plan *plan) {
  DeviceInfo dev;
  int st = device_info(&dev);
  if (st != KL_OK) return st;
  const int n = p->nfactors;
  plan->natural = natural_layout(p);
  plan->rows_fast = plan->natural ? 0 : rows_adjacent(p->m1, p->m2, p->x_rs1, p->x_rs2, p->x_es);
  const int cap = std::min(kMaxSteps, p->max_fused > 0 ? int(p->max_fused) : kMaxSteps);
  // (the natural-order kernel takes part: its groups of P x P factors are longer than the other
  // kernels' for P = 64, e.g. 1024 x 64^3 in 2 + 1 steps where they need 1 + 1 + 1: 2.30 ms
  // against 2.44-2.82 on the H100.  So the passes, and the scratch buffers, depend on x's and
  // y's alignment: kron_cuda.prepare asks kl_kron_cuda_workspace for both)
  auto group_ok = [&](int last, int count, PassCfg *c) {
    return configure_pass(p, dtype, dev, pass_shape(p, *plan, last, count), c);
  };
  // the longest feasible group ending at each factor
  std::vector<int> maxc(n, 0);
  for (int last = 0; last < n; ++last) {
    PassCfg c;
    for (int count = 1; count <= std::min(cap, last + 1); ++count) {
      if (!group_ok(last, count, &c)) break;
      maxc[last] = count;
    }
    if (maxc[last] == 0) {
      std::string msg = "kron_matmul_cuda: factor " + std::to_string(last) +
                        " does not fit the GPU's shared memory";
      return fail(KL_ERR_UNSUPPORTED, msg.c_str());
    }
  }
  int greedy = 0;
  for (int i = n - 1; i >= 0; i -= maxc[i]) ++greedy;
  // the same number of passes with the factors spread evenly: smaller tiles, more blocks per SM
  std::vector<int> counts;
  int i = n - 1, left = greedy;
  // (the spread can run out of passes before the factors where a short group limits it:
  // then the greedy grouping stands)
  while (i >= 0 && left > 0) {
    const int want = int((i + 1 + left - 1) / left);
    const int c = std::min(maxc[i], want);
    counts.push_back(c);
    i -= c;
    --left;
  }
  if (i >= 0) {
    counts.clear();
    for (int j = n - 1; j >= 0; j -= maxc[j]) counts.push_back(maxc[j]);
  }
  plan->passes.clear();
  int last = n - 1;
  plan->scratch_elems = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    PassCfg c;
    if (!configure_pass(p, dtype, dev, pass_shape(p, *plan, last, counts[k]), &c))
      return fail(KL_ERR_INVALID, "kron_matmul_cuda: plan");
    plan->passes.push_back(c);
    last -= counts[k];
    if (k + 1 < counts.size()) {
      const int64_t len_out = prod_range(p->P, 0, last) * prod_range(p->Q, last + 1, n - 1);
      plan->scratch_elems = std::max(plan->scratch_elems, len_out * p->m1 * p->m2);
    }
  }
  plan->nscratch = std::min<int>(2, int(plan->passes.size()) - 1);
  return KL_OK;
}

// Opt-in shared memory and occupancy, cached per kernel and device.
int occupancy(const void *func, int dev, int threads, size_t smem, int *blocks) {
  static std::map<std::tuple<const void *, int>, bool> attr_set;
  static std::map<std::tuple<const void *, int, int, size_t>, int> occ_cache;
  std::lock_guard<std::mutex> lock(g_occ_mutex);
  cudaError_t e;
  auto key = std::make_tuple(func, dev);
  if (!attr_set.count(key)) {
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (e != cudaSuccess) return cuda_fail(e, "cudaFuncSetAttribute");
    attr_set[key] = true;
  }
  auto okey = std::make_tuple(func, dev, threads, smem);
  auto it = occ_cache.find(okey);
  if (it == occ_cache.end()) {
    int b = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, func, threads, smem);
    if (e != cudaSuccess) return cuda_fail(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    it = occ_cache.emplace(okey, b).first;
  }
  *blocks = it->second;
  return KL_OK;
}

struct Operand {
  const void *ptr;
  int64_t rs1, rs2, es;
};

// Kernel parameters of a pass whose lines are rows m1 x m2 (x instances) of `in` and `out`.
void fill_params(const kl_kron_problem *p, const PassCfg &c, int64_t m1, int64_t m2,
                 const Operand &in, const Operand &out, double alpha, double beta, PassP *pp) {
  *pp = PassP{};
  const int es = c.k->elem_bytes;
  const bool tf32 = is_tf32(c.k);
  const int Vs = c.k->kind == kMma && !tf32 ? 8 : 16 / es;  // elements per 16-byte chunk in smem
  const int gbytes = c.k->gmem_bytes;  // element size in global memory
  const int Vg = 16 / gbytes;          // elements per 16-byte chunk in global memory
  const int rows_fast = c.sh.rows_fast;
  const int64_t M = m1 * m2;
  pp->nsteps = c.count;
  pp->L = c.L;
  pp->TM = c.TM;
  pp->C = c.C;
  pp->rows_fast = rows_fast;
  pp->Bin = c.Bin;
  pp->Bout = c.Bout;
  pp->fs_elems = c.fs_elems;
  pp->buf_elems = c.buf_elems;
  pp->TQ = c.TQ;
  pp->nqt = c.nqt;
  const bool aligned = aligned16(in.ptr);
  const bool in_rows_adjacent = rows_adjacent(m1, m2, in.rs1, in.rs2, in.es);
  const bool x_vec = c.k->kind == kMma && !tf32 && in.es == 1 && c.Bin % 8 == 0 && c.st[0].P % 8 == 0 &&
                     aligned && (m1 == 1 || in.rs1 % 8 == 0) && (m2 == 1 || in.rs2 % 8 == 0);
  pp->x_vec = x_vec;
  pp->x_run = (c.k->kind == kFfma || tf32) && c.k->elem_bytes == gbytes && in.es == 1 &&
              c.st[0].P % 8 == 0 && c.Bin % 8 == 0;
  // whole 16-byte chunks of lines: the same-dtype kernels, lines along adjacent rows
  pp->x_chunk = (c.k->kind == kMma || c.k->elem_bytes == gbytes) && rows_fast && m2 > 1 &&
                in.rs2 == 1 && in.es % Vg == 0 && aligned && c.L % Vg == 0 && c.TM % Vg == 0;
  pp->div_lc = FastDiv(uint32_t(std::max(1, c.L / Vg)));
  pp->div_r0 = FastDiv(uint32_t(c.st[0].R));
  pp->div_pg = FastDiv(uint32_t(std::max(1, c.st[0].P / 8)));
  if (x_vec)
    pp->a_log2 = __builtin_ctz(unsigned(pow2_divisor(c.L, 8)));
  else if (rows_fast && in_rows_adjacent)
    pp->a_log2 = __builtin_ctz(unsigned(pow2_divisor(c.TM, 32)));
  else
    // 4 lines x 8 consecutive elements per warp instruction (fewer lines if L is smaller)
    pp->a_log2 = __builtin_ctz(unsigned(pow2_divisor(c.L, 4)));
  pp->y_vec = (c.S * out.es) % Vs == 0 && aligned16(out.ptr);
  pp->prefetch = c.pf;
  pp->y_rowvec = c.k->kind == kMma && !rows_fast && c.S == 1 && out.es == 1 && c.Bout % Vs == 0 &&
                 aligned16(out.ptr) && (m1 == 1 || out.rs1 % Vs == 0) &&
                 (m2 == 1 || out.rs2 % Vs == 0);
  pp->div_bin = FastDiv(uint32_t(c.Bin));
  pp->div_p0 = FastDiv(uint32_t(c.st[0].P));
  pp->div_l = FastDiv(uint32_t(c.L));
  pp->div_tmc = FastDiv(uint32_t(rows_fast ? c.TM : c.C));
  pp->div_bout = FastDiv(uint32_t(c.Bout));
  pp->M = M;
  pp->m2n = m2;
  pp->S = c.S;
  pp->ntm = (M + c.TM - 1) / c.TM;
  pp->ntc = (c.S + c.C - 1) / c.C;
  pp->ntiles = pp->ntm * pp->ntc * c.nqt;
  pp->x = in.ptr;
  pp->xrs1 = in.rs1;
  pp->xrs2 = in.rs2;
  pp->xes = in.es;
  pp->y = const_cast<void *>(out.ptr);
  pp->yrs1 = out.rs1;
  pp->yrs2 = out.rs2;
  pp->yes = out.es;
  pp->alpha = alpha;
  pp->beta = beta;
  for (int s = 0; s < c.count; ++s) {
    const StepGeo &g = c.st[s];
    StepP &d = pp->st[s];
    const int i = c.last - s;
    d.P = g.P;
    d.Q = g.Q;
    d.Qpad = g.Qpad;
    d.R = g.R;
    d.ld = g.ld;
    d.f_off = g.f_off;
    d.f_ld = g.f_ld;
    d.f_lo = g.f_lo;
    const bool lastp = s + 1 == c.count;
    const int pn = lastp ? 1 : c.st[s + 1].P;
    d.Rn = g.R / pn;
    d.div_pn = FastDiv(uint32_t(pn));
    if (c.k->kind == kFfma) {
      d.div_chunks = FastDiv(uint32_t(int64_t(g.R) * c.L / Vs));
    } else {
      const int64_t nmt = (int64_t(g.R) * c.L + 15) / 16;
      d.div_chunks = FastDiv(uint32_t((nmt + 1) / 2));
    }
    d.F = p->F[i];
    d.frs = p->F_rs[i];
    d.fcs = p->F_cs[i];
  }
}

// Kernel parameters of a pass on the natural-order kernel, from `src` to `dst`.
NatP natural_params(const kl_kron_problem *p, const PassCfg &c, int64_t M, const void *src,
                    void *dst, bool final_pass) {
  NatP np{};
  np.nsteps = c.count;
  np.line_tile = c.sh.I == 1;
  np.T = c.nat_T;
  np.Bin = c.Bin;
  np.Bout = c.Bout;
  np.rows = M * c.sh.O;
  np.I = c.sh.I;
  np.ntiles = c.ntiles;
  np.buf1_elems = c.nat_buf;
  np.stages = c.nat_stages;
  np.buf2_elems = c.nk->col_groups > 1 && c.count > 1 ? c.nat_buf : 0;
  np.fs_elems = c.count * c.nk->f_copies * c.nk->P * c.nk->P;
  np.x = static_cast<const float *>(src);  // (the kernel's own element type)
  np.y = static_cast<float *>(dst);
  np.alpha_d = final_pass ? p->alpha : 1.0;
  np.beta_d = final_pass ? p->beta : 0.0;
  np.alpha = float(np.alpha_d);
  np.beta = float(np.beta_d);
  for (int s = 0; s < c.count; ++s) {
    const int i = c.last - s;
    np.F[s] = static_cast<const float *>(p->F[i]);
    np.frs[s] = p->F_rs[i];
    np.fcs[s] = p->F_cs[i];
  }
  return np;
}

// Shapes and dtype always; pointers only when the call will launch (plan queries take none).
int validate(const kl_kron_problem *p, int dtype, bool launching = true) {
  if (!p || p->nfactors < 1 || !p->P || !p->Q || !p->F_rs || !p->F_cs ||
      (launching && (!p->x || !p->y || !p->F)))
    return fail(KL_ERR_INVALID, "kron_matmul_cuda: invalid problem description");
  if (dtype != KL_FLOAT32 && dtype != KL_FLOAT64 && dtype != KL_FLOAT16 && dtype != KL_BFLOAT16)
    return fail(KL_ERR_INVALID, "kron_matmul_cuda: unsupported dtype");
  for (int i = 0; i < p->nfactors; ++i) {
    if (p->P[i] < 1 || p->Q[i] < 1)
      return fail(KL_ERR_INVALID, "kron_matmul_cuda: factors must be non-empty");
    if (launching && !p->F[i])
      return fail(KL_ERR_INVALID, "kron_matmul_cuda: factor pointer is NULL");
  }
  if (p->m1 < 0 || p->m2 < 0) return fail(KL_ERR_INVALID, "kron_matmul_cuda: negative rows");
  return KL_OK;
}

std::string describe(const kl_kron_problem *p, const Plan &plan, int dev_sms) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "passes=%d scratch=%lldx%d order=%s lines=%s\n",
                int(plan.passes.size()), (long long)plan.scratch_elems, plan.nscratch,
                plan.natural ? "natural" : "sliced", plan.rows_fast ? "rows" : "instances");
  s += line;
  for (const PassCfg &c : plan.passes) {
    std::snprintf(line, sizeof line,
                  "  factors %d..%d kernel=%s L=%d(TM=%d,C=%d) threads=%d TQ=%d smem=%zu "
                  "tiles=%lld grid=%d (%d/SM of %d)\n",
                  c.last - c.count + 1, c.last, c.nk ? c.nk->name : c.k->name, c.L, c.TM, c.C, c.NT, c.TQ, c.smem,
                  (long long)c.ntiles, c.grid, c.occ, dev_sms);
    s += line;
  }
  (void)p;
  return s;
}

// Plans depend on shapes, dtype, row layout class, fusion cap, tuning and device: cached by those.
int cached_plan(const kl_kron_problem *p, int dtype, Plan *plan, DeviceInfo *dev) {
  int st = device_info(dev);
  if (st != KL_OK) return st;
  // (the natural-order kernels' knobs, read once a call: every dtype's plans depend on them)
  const NatTune nt = natural_tune();
  std::vector<int64_t> key = {dtype, dev->id, p->m1, p->m2, p->nfactors, p->max_fused,
                              rows_adjacent(p->m1, p->m2, p->x_rs1, p->x_rs2, p->x_es),
                              natural_layout(p),
                              g_tune.L, g_tune.tile_q, g_tune.threads, g_tune.budget_kb,
                              g_tune.kind, dtype == KL_FLOAT32 ? fp32_mode() : 0,
                              nt.on, nt.T, nt.TI, nt.ti_min, nt.warps, nt.shorter, nt.stages,
                              nt.ring, nt.ring_ti, nt.ring_half,
                              aligned16(p->x) && aligned16(p->y)};
  for (int i = 0; i < p->nfactors; ++i) {
    key.push_back(p->P[i]);
    key.push_back(p->Q[i]);
  }
  static std::map<std::vector<int64_t>, Plan> cache;
  {
    std::lock_guard<std::mutex> lock(g_plan_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      *plan = it->second;
      return KL_OK;
    }
  }
  if ((st = make_plan(p, dtype, plan)) != KL_OK) return st;
  for (PassCfg &c : plan->passes) c.grid = int(std::min<int64_t>(c.ntiles, int64_t(c.occ) * dev->sms));
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  if (cache.size() > 4096) cache.clear();
  cache.emplace(key, *plan);
  return KL_OK;
}

int plan_and_prepare(const kl_kron_problem *p, int dtype, Plan *plan, DeviceInfo *dev) {
  return cached_plan(p, dtype, plan, dev);
}

}  // namespace
}  // namespace cu
}  // namespace kl

extern "C" int64_t kl_kron_cuda_scratch_elems(const kl_kron_problem *p) {
  // dtype-independent bound: the longest intermediate row times the rows
  int64_t most = 0;
  for (int s = 1; s < p->nfactors; ++s) {
    int64_t len = 1;
    for (int i = 0; i < p->nfactors; ++i) len *= i >= p->nfactors - s ? p->Q[i] : p->P[i];
    most = std::max(most, len);
  }
  return most * p->m1 * p->m2;
}

extern "C" int kl_kron_cuda_workspace(const kl_kron_problem *p, int dtype, int64_t *elems,
                                      int *nbufs) {
  using namespace kl::cu;
  int st = validate(p, dtype, false);
  if (st != KL_OK) return st;
  *elems = 0;
  *nbufs = 0;
  if (p->m1 == 0 || p->m2 == 0) return KL_OK;
  Plan plan;
  DeviceInfo dev;
  if ((st = cached_plan(p, dtype, &plan, &dev)) != KL_OK) return st;
  *elems = plan.nscratch ? plan.scratch_elems : 0;
  *nbufs = plan.nscratch;
  return KL_OK;
}

extern "C" int kl_kron_cuda_config(const kl_kron_problem *p, int dtype, char *buf, int len) {
  using namespace kl::cu;
  int st = validate(p, dtype, false);
  if (st != KL_OK) return st;
  Plan plan;
  DeviceInfo dev;
  if ((st = plan_and_prepare(p, dtype, &plan, &dev)) != KL_OK) return st;
  std::string s = describe(p, plan, dev.sms);
  if (const int clusters = cluster_8x6_clusters(p, dtype))  // (the pass plan is not run then)
    s = "passes=1 one-pass clusters=" + std::to_string(clusters) +
        "\npass 0: factors=6 kernel=f32.cluster16.8x6\n";
  if (buf && len > 0) {
    std::strncpy(buf, s.c_str(), size_t(len) - 1);
    buf[len - 1] = '\0';
  }
  return KL_OK;
}

extern "C" int kl_kron_cuda_tune(int lines, int tile_q, int threads, int smem_budget_kb,
                                 int kind) {
  std::lock_guard<std::mutex> lock(kl::cu::g_mutex);
  kl::cu::g_tune.L = lines;
  kl::cu::g_tune.tile_q = tile_q;
  kl::cu::g_tune.threads = threads;
  kl::cu::g_tune.budget_kb = smem_budget_kb;
  kl::cu::g_tune.kind = kind;
  return KL_OK;
}

extern "C" int kl_kron_float32_mode(int mode) { return kl::cu::g_fp32.set(mode); }

extern "C" int kl_cuda_device_check(void) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::string msg = "no GPU: ";
    msg += e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime sees no device";
    return kl::fail(KL_ERR_NO_DEVICE, msg.c_str());
  }
  return KL_OK;
}

namespace kl {
namespace cu {
namespace {
int run_plan(const kl_kron_problem *p, int dtype, const Plan &plan, void *scratch0,
             void *scratch1, int64_t scratch_elems, void *stream);
}  // namespace
}  // namespace cu
}  // namespace kl

extern "C" int kl_kron_matmul_cuda(const kl_kron_problem *p, int dtype, void *scratch0,
                                   void *scratch1, int64_t scratch_elems, void *stream) {
  using namespace kl::cu;
  int st = validate(p, dtype);
  if (st != KL_OK) return st;
  if (p->m1 == 0 || p->m2 == 0) return KL_OK;
  if (launch_cluster_8x6(p, dtype, static_cast<cudaStream_t>(stream), &st)) return st;
  Plan plan;
  DeviceInfo dev;
  if ((st = plan_and_prepare(p, dtype, &plan, &dev)) != KL_OK) return st;
  return run_plan(p, dtype, plan, scratch0, scratch1, scratch_elems, stream);
}

// A repeated signature's plan, made once: a replay launches it with new pointers and skips
// validation, the knob reads and the plan cache (a tiny product is host-bound).  Null where a
// call must go through kl_kron_matmul_cuda each time (the opt-in cluster kernel, no rows).
extern "C" void *kl_kron_cuda_bind(const kl_kron_problem *p, int dtype) {
  using namespace kl::cu;
  if (validate(p, dtype, false) != KL_OK || p->m1 == 0 || p->m2 == 0 ||
      cluster_8x6_clusters(p, dtype))
    return nullptr;
  Plan plan;
  DeviceInfo dev;
  if (plan_and_prepare(p, dtype, &plan, &dev) != KL_OK) return nullptr;
  return new Plan(plan);
}

extern "C" void kl_kron_cuda_unbind(void *bound) { delete static_cast<kl::cu::Plan *>(bound); }

// The bound plan on new pointers: p must have the shapes, strides and pointer alignment the
// plan was bound with (the caller's signature guarantees them).
extern "C" int kl_kron_cuda_current_device(void) { return kl::current_device(); }

extern "C" int kl_kron_cuda_launch_bound(const void *bound, const kl_kron_problem *p, int dtype,
                                         void *scratch0, void *scratch1, int64_t scratch_elems,
                                         void *stream) {
  if (!bound || !p->x || !p->y) return kl::fail(KL_ERR_INVALID, "kron_matmul_cuda: bad replay");
  return kl::cu::run_plan(p, dtype, *static_cast<const kl::cu::Plan *>(bound), scratch0,
                          scratch1, scratch_elems, stream);
}

namespace kl {
namespace cu {
namespace {
int run_plan(const kl_kron_problem *p, int dtype, const Plan &plan, void *scratch0,
             void *scratch1, int64_t scratch_elems, void *stream) {
  if ((plan.nscratch >= 1 && !scratch0) || (plan.nscratch >= 2 && !scratch1))
    return kl::fail(KL_ERR_INVALID, "kron_matmul_cuda: scratch buffers missing");
  // (a layout sized under other planner settings, e.g. the natural-order knobs changed since)
  if (scratch_elems >= 0 && plan.nscratch >= 1 && plan.scratch_elems > scratch_elems)
    return kl::fail(KL_ERR_INVALID, "kron_matmul_cuda: scratch buffers smaller than the plan needs");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t M = p->m1 * p->m2;
  const int n = p->nfactors;
  void *scratch[2] = {scratch0, scratch1};
  const void *src = p->x;
  Operand in{p->x, p->x_rs1, p->x_rs2, p->x_es};
  int last = n - 1;
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    const PassCfg &c = plan.passes[k];
    const bool final_pass = k + 1 == plan.passes.size();
    void *dst = final_pass ? p->y : scratch[k % 2];
    int64_t m1 = p->m1, m2 = p->m2;
    Operand out;
    last -= c.count;
    if (plan.natural) {
      // lines (row, modes before) x (modes after, adjacent): rows of 2 levels in x and y
      m1 = M * c.sh.O;
      m2 = c.sh.I;
      in = Operand{src, c.Bin * c.sh.I, 1, c.sh.I};
      out = Operand{dst, c.Bout * c.sh.I, 1, c.sh.I};
    } else if (final_pass) {
      out = Operand{p->y, p->y_rs1, p->y_rs2, p->y_es};
    } else {
      int64_t len = 1;
      for (int i = 0; i < n; ++i) len *= i <= last ? p->P[i] : p->Q[i];
      out = plan.rows_fast ? Operand{dst, p->m2, 1, M} : Operand{dst, p->m2 * len, len, 1};
    }
    cudaError_t e;
    if (c.nk) {
      NatP np = natural_params(p, c, M, src, dst, final_pass);
      e = c.nk->launch(np, c.grid, c.NT, c.smem, s);
      src = dst;
      in = out;
      if (e != cudaSuccess) return cuda_fail(e, "launch");
      continue;
    }
    PassP pp;
    fill_params(p, c, m1, m2, in, out, final_pass ? p->alpha : 1.0, final_pass ? p->beta : 0.0,
                &pp);
    e = c.k->launch(pp, c.grid, c.NT, c.smem, s);
    if (e != cudaSuccess) return cuda_fail(e, "launch");
    src = dst;
    in = out;
  }
  return KL_OK;
}
}  // namespace
}  // namespace cu
}  // namespace kl
