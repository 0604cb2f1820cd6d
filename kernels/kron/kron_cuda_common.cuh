// Shared by the host planner and the CUDA kron kernels: the description of one memory pass.
//
// A pass applies a group of consecutive factors (last first) to every "line" of the current
// matrix.  A line is one block instance: Bin = prod(P) contiguous elements of one row (FastKron's
// slice group), and after the group its Bout = prod(Q) results go to k*S + j, where j is the
// instance's index in its row and S the number of instances per row.  A thread block takes a tile
// of L = TM * C lines (TM rows x C consecutive instances), keeps it in shared memory for every
// step of the group and writes each result once, to its final place.
//
// Shared-memory layout of a step with P rows of input (the "transposed" layout): element (p, rho)
// of the step's input, rho = r * L + line, sits at p * ld + phys(rho / V) * V + rho % V, where V is
// the number of elements in a 16-byte chunk.  Lines are the fastest index, so a thread's register
// tile (V consecutive lines) is one 16-byte load, lanes of a warp read consecutive chunks of one
// p-row (no bank conflict whatever P is), and the final store of V lines is one vector store to
// V consecutive instances.  Rows are padded by one chunk (two for 8-byte types) so that scattered
// accesses at consecutive p fall in different banks, and phys() XOR-folds the chunk index (our form
// of FastKron's shift caching) so that accesses at chunks a power of two apart spread over banks.
#ifndef KRONLINALG_KRON_CUDA_COMMON_CUH
#define KRONLINALG_KRON_CUDA_COMMON_CUH

#include <cuda_runtime.h>

#include <cstdint>

#ifdef KL_EMU  // host emulation of the kernels, a development tool outside the package
#include "kron_cuda_ptx_emu.h"
#else
#include "cuda_ptx.cuh"
#endif

namespace kl {
namespace cu {

// Whether a pointer allows 16-byte vector accesses.
inline bool aligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

constexpr int kMaxSteps = 16;

// n / d for 0 <= n < 2^31 with one multiply-high (round-up method); d >= 1.
struct FastDiv {
  uint32_t d = 1, mul = 1, shr = 0;
  FastDiv() = default;
  __host__ __device__ explicit FastDiv(uint32_t d_) : d(d_) {
    shr = 0;
    while ((uint64_t(1) << shr) < d) ++shr;
    mul = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shr) - d) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    return (__umulhi(n, mul) + n) >> shr;
#else
    return uint32_t(((uint64_t(n) * mul >> 32) + n) >> shr);
#endif
  }
};

// Bank-spreading permutations of 16-byte chunks: XOR the low 3 bits with a function of the
// others, a bijection on every aligned group of 8 chunks, so consecutive chunks stay
// conflict-free.  The CUDA-core kernel folds every 3-bit digit of the group index in (shared
// memory stays below 2^15 chunks, so the fold stops at h >> 9); the tensor-core kernels take the
// group index's low digit only, a third of the instructions.  Measured on the H100 against the
// fold: bfloat16 kron_large 5-12 % faster, 3xTF32 float32 within noise (+-5 %), but the
// CUDA-core 1024 x 8^6 10 % slower, hence two.  Every reader and writer of a buffer
// must use the same one (PermTc selects it in code shared by both kinds).
__host__ __device__ __forceinline__ int phys_chunk(int c) {
  int h = c >> 3;
  h ^= (h >> 3) ^ (h >> 6) ^ (h >> 9);
  return c ^ (h & 7);
}
__host__ __device__ __forceinline__ int phys_chunk_tc(int c) { return c ^ ((c >> 3) & 7); }
template <bool PermTc>
__host__ __device__ __forceinline__ int phys_chunk_of(int c) {
  return PermTc ? phys_chunk_tc(c) : phys_chunk(c);
}

struct StepP {
  int P, Q, Qpad;  // factor shape; Qpad: Q rounded up to the register/warp tile
  int R;           // rows of this step's input per line (= line length / P)
  int ld;          // pitch of one p-row in shared memory (elements)
  int f_off;       // offset of this step's factor in the factor area (elements)
  int f_ld;        // pitch of the factor in shared memory (elements)
  int f_lo;        // 3xTF32: offset of the factor's lo part from its hi part, 0 = split per use
  int Rn;          // R / P of the next step (0 on the last step)
  FastDiv div_pn;  // P of the next step (1 on the last step)
  FastDiv div_chunks;  // chunks (R * L / V) of this step, or m-tiles for the MMA kernel
  const void *F;
  int64_t frs, fcs;
};

struct PassP {
  int nsteps;
  int L, TM, C;    // lines per tile = TM * C
  int rows_fast;   // line order: 0 -> line = c + C * mt (instances fastest), 1 -> mt + TM * c
  int a_log2;      // load mapping: 2^a_log2 consecutive lines per group of lanes
  int Bin, Bout;   // line length before / after the group
  int fs_elems;    // elements of the factor area (multiple of 8)
  int buf_elems;   // elements of the data buffer (multiple of 8)
  int TQ, nqt;     // q tiles (single-step passes); else TQ = Qpad, nqt = 1
  int y_vec;       // 16-byte stores possible when lines are consecutive in y
  int x_vec;       // 16-byte loads of 8 consecutive elements possible (half kernels)
  int x_run;       // elements contiguous and P of the first step a multiple of 8 (CUDA cores)
  int x_chunk;     // V lines adjacent in x and 16-byte aligned: one 16-byte copy per V lines
  int y_rowvec;    // one instance per row, rows 16-byte aligned: 16-byte runs along k (half kernels)
  int prefetch;    // tensor cores: a third buffer takes the next tile while this one is computed
  FastDiv div_bin, div_p0, div_l, div_tmc, div_bout, div_r0, div_pg, div_lc;
  int64_t M, m2n, S;
  int64_t ntm, ntc, ntiles;
  const void *x;
  int64_t xrs1, xrs2, xes;
  void *y;
  int64_t yrs1, yrs2, yes;
  double alpha, beta;
  StepP st[kMaxSteps];
};

constexpr int64_t kNoLine = INT64_MIN;  // line-table entry of a line outside the matrix

#if defined(__CUDACC__) || defined(KL_EMU)
struct Tile {
  int64_t mt, ct;
  int qt;
};

// Tiles run instances fastest, then rows, then q tiles: neighbouring blocks write neighbouring
// instances (full sectors in L2) and a block's next tile mostly keeps its factor tile.
__device__ __forceinline__ Tile decode_tile(const PassP &p, int64_t t) {
  Tile r;
  r.ct = t % p.ntc;
  const int64_t rest = t / p.ntc;
  r.mt = rest % p.ntm;
  r.qt = int(rest / p.ntm);
  return r;
}

// Unit u of the loads in runs of 8 consecutive p of one line's first step (x_run, x_vec): lanes
// take 2^a_log2 lines x consecutive r at one p group.  The run's line l, row r of the line and
// first p.
__device__ __forceinline__ void run_unit(const PassP &p, int u, int *l, int *r, int *p0) {
  const int a = u & ((1 << p.a_log2) - 1), t = u >> p.a_log2;
  const int t2 = int(p.div_r0.div(uint32_t(t)));
  *r = t - t2 * p.st[0].R;
  const int lh = int(p.div_pg.div(uint32_t(t2)));
  *p0 = (t2 - lh * (p.st[0].P >> 3)) << 3;
  *l = (lh << p.a_log2) + a;
}

// Offset of line l's first input element (*xo) and of its output element k = 0 (*yo), or
// kNoLine for both where the line lies outside the matrix.
__device__ __forceinline__ void line_offsets(const PassP &p, const Tile &t, int l, int64_t *xo,
                                             int64_t *yo) {
  const int hi = int(p.div_tmc.div(uint32_t(l)));
  const int lo = l - hi * (p.rows_fast ? p.TM : p.C);
  const int mi = p.rows_fast ? lo : hi, ci = p.rows_fast ? hi : lo;
  const int64_t m = t.mt * p.TM + mi, j = t.ct * p.C + ci;
  *xo = *yo = kNoLine;
  if (m < p.M && j < p.S) {
    const int64_t m1 = m / p.m2n, m2 = m - m1 * p.m2n;
    *xo = m1 * p.xrs1 + m2 * p.xrs2 + j * p.Bin * p.xes;
    *yo = m1 * p.yrs1 + m2 * p.yrs2 + j * p.yes;
  }
}

// Offsets of every line's first input element and of its output element k = 0.
__device__ __forceinline__ void fill_lines(const PassP &p, const Tile &t, int64_t *xoff,
                                           int64_t *yoff) {
  for (int l = threadIdx.x; l < p.L; l += blockDim.x) line_offsets(p, t, l, xoff + l, yoff + l);
}

#endif

}  // namespace cu
}  // namespace kl

#endif
