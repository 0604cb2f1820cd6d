// CUDA batched block-sparse SpMM: C[i] = alpha * A[i] @ X[i] for a stack of small block-sparse
// matrices that share one block pattern (KAMI's regime: orders <= 256, b = 16), FP16 / BF16 on
// tensor cores (mma m16n8k16, FP32 accumulate).
//
// Why a kernel of its own: through the block-diagonal embedding each 2-4-block row of every
// matrix is a work item of the general SpMM, one pipeline fill per item.  Here a CTA is
// persistent and walks work units (matrix i, RHS tile j) with a 2-4 stage cp.async pipeline: it
// copies whole units (the matrix's stored blocks and the k x NT slice of X[i]) into shared
// memory while it multiplies an earlier one, so the copies of many small problems stay in
// flight back to back.  The pattern (row_ptr, col_idx) is read once per CTA into shared memory as
// int32.  A warp owns a 16 x WN strip of C (a block row, WN = 16 or 32 columns), walks the block
// row's stored blocks only, then writes its FP32 accumulators (times alpha, rounded) into its
// own 16 x WN scratch in shared memory and stores them to C as 16-byte row pieces.  (The
// first version stored each thread's fragments as 4-byte pairs, half a 32-byte sector per row
// and store: C written at 1.1 TB/s on the H100 where bmm writes at 2.5.)
//
// Narrow right-hand sides (n <= 8, where the product streams A's blocks and the 0.6x-of-bmm mark
// lives): an 8-column tile (n = 4 natively: 8-byte rows of X and C, no padding copy) whose
// stage is A's blocks plus a sliver of X, so 256 x 256 at 50 % fits three stages; and, on
// compute capability 9.0 with the unit's A and X each one contiguous piece (n = NT, X rows
// packed), bulk (TMA) loads: one thread copies a unit's blocks and X slice with two bulk copies
// counted on the stage's mbarrier, where 256 threads issued 16-byte cp.async (A's blocks then
// land unswizzled: the ldmatrix of an A block meets 2-way bank conflicts, one a block).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "blocksparse.h"
#include "cuda_device.hpp"
#include "cuda_ptx.cuh"

namespace kl {
namespace bsb {

constexpr int kThreads = 256;  // 8 warps (512 measured 3 % slower at order 256, where one CTA
                                // fills an SM)
constexpr int kMaxOrder = 256;  // rows and columns of one matrix (16 block rows at most)

__host__ __device__ constexpr int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Shared-memory bytes of the pattern (int32 row_ptr and col_idx) and of one pipeline stage
// (the stored blocks, then the kpad x NT slice of X with a pitch of NT + 8 elements, which makes
// the transposed fragment loads of 8 consecutive rows hit distinct banks).
__host__ __device__ inline int64_t index_bytes(int64_t rb, int64_t nnzb) {
  return align16((rb + 1 + nnzb) * 4);
}
// X's pitch in a stage: NT + 8, or 8 for the 8-column tile (8 rows of 16 bytes are 128
// consecutive bytes), or with bulk loads the packed rows of X itself (n = NT).
__host__ __device__ constexpr int x_pitch(int nt, bool bulk) {
  return bulk || nt == 8 ? nt : nt + 8;
}
__host__ __device__ inline int64_t stage_elems(int64_t nnzb, int64_t kpad, int nt, bool bulk) {
  return nnzb * 256 + kpad * x_pitch(nt, bulk);
}
// Each warp's C scratch: 16 rows of WN + 8 elements (the pitch puts the 8 rows of a fragment
// store on distinct banks).
__host__ __device__ constexpr int strip_cols(int nt) { return nt < 32 ? nt : 32; }
__host__ __device__ constexpr int64_t c_scratch_bytes(int nt) {
  return int64_t(kThreads / 32) * 16 * (strip_cols(nt) + 8) * 2;
}

template <bool BF16> struct Elem;
template <> struct Elem<false> {
  using T = __half;
  using T2 = __half2;
  static __device__ __forceinline__ T2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct Elem<true> {
  using T = __nv_bfloat16;
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ T2 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

// Chunk c (16 bytes, 0..31) of a 16 x 16 block: row c / 2, half c % 2, stored with the halves of
// rows 4-7 and 12-15 swapped, so the 8 row addresses of one ldmatrix phase hit distinct banks.
__device__ __forceinline__ int swizzled_chunk(int row, int half) {
  return row * 2 + (half ^ ((row >> 2) & 1));
}

// BULK: the units arrive by bulk copies (above; the launcher checks their conditions).
template <bool BF16, int NT, int S, bool BULK>
__global__ void __launch_bounds__(kThreads)
    batched_kernel(kl_bs_batched_problem p, int64_t ntn, bool stage_c) {
  using T = typename Elem<BF16>::T;
  using T2 = typename Elem<BF16>::T2;
  constexpr int WN = strip_cols(NT);  // columns of a warp's strip
  constexpr int NSTRIP = NT / WN;
  constexpr int XP = x_pitch(NT, BULK);
  KL_DYNAMIC_SMEM(smem_raw);
  const int rb = int((p.m + 15) / 16), cb = int((p.k + 15) / 16);
  const int kpad = cb * 16, nnzb = int(p.nnzb);
  int *s_rp = reinterpret_cast<int *>(smem_raw);
  int *s_col = s_rp + rb + 1;
  T *stages = reinterpret_cast<T *>(smem_raw + index_bytes(rb, nnzb));
  const int64_t selems = stage_elems(nnzb, kpad, NT, BULK);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int CP = WN + 8;  // the C scratch's pitch
  T *cs = stages + S * selems + warp * 16 * CP;  // this warp's (only when stage_c)
  // the stages' mbarriers (BULK), after the C scratch
  uint64_t *full = reinterpret_cast<uint64_t *>(stages + S * selems + c_scratch_bytes(NT) / 2);
  for (int i = tid; i <= rb; i += kThreads) s_rp[i] = int(p.row_ptr[i]);
  for (int i = tid; i < nnzb; i += kThreads) s_col[i] = int(p.col_idx[i]);
  if constexpr (BULK) {
    // X's rows [k, kpad) meet A's zero padding: zeros (not stale bits that may be NaN), which
    // no bulk copy overwrites
    for (int s = 0; s < S; ++s) {
      T *Xs = stages + s * selems + int64_t(nnzb) * 256;
      for (int i = tid; i < (kpad - int(p.k)) * XP; i += kThreads) Xs[p.k * XP + i] = T(0.0f);
    }
    if (tid == 0) {
      for (int s = 0; s < S; ++s) cu::mbar_init(&full[s], 1);
      cu::fence_mbar_init();
    }
    __syncthreads();
  }

  const T *val = static_cast<const T *>(p.val);
  const T *X = static_cast<const T *>(p.X);
  T *C = static_cast<T *>(p.C);
  const int64_t total = p.batch * ntn;
  const int a_chunks = nnzb * 32, x_row_chunks = NT / 8, x_chunks = kpad * x_row_chunks;
  const bool x_rows8 = NT == 8 && p.n == 4;

  // the unit's blocks and X slice into stage s (rows past k and columns past n zero-filled)
  auto load = [&](int64_t u, int s) {
    const int64_t item = u / ntn;
    const int64_t col0 = (u % ntn) * NT;
    T *As = stages + s * selems;
    T *Xs = As + int64_t(nnzb) * 256;
    const T *Ag = val + item * p.nnzb * 256;
    for (int c = tid; c < a_chunks; c += kThreads) {
      const int blk = c >> 5, w = c & 31;
      cu::cp_async_16(As + blk * 256 + swizzled_chunk(w >> 1, w & 1) * 8, Ag + int64_t(c) * 8,
                      true);
    }
    const T *Xg = X + item * p.x_stride;
    for (int c = tid; c < x_chunks; c += kThreads) {
      const int r = c / x_row_chunks, cc = c % x_row_chunks;
      const int64_t col = col0 + cc * 8;
      const bool ok = r < p.k && col < p.n;
      if (x_rows8) {  // rows of 8 bytes: the row, then zeros in columns 4-7
        cu::cp_async_elem<8>(Xs + r * XP, ok ? Xg + r * p.ldx : Xg, ok);
        cu::cp_async_elem<8>(Xs + r * XP + 4, Xg, false);
      } else {
        cu::cp_async_16(Xs + r * XP + cc * 8, ok ? Xg + r * p.ldx + col : Xg, ok);
      }
    }
  };
  // BULK (thread 0): the unit's blocks and its k x n slice of X (ntn = 1), two bulk copies
  // counted on stage s's mbarrier
  const uint32_t a_bytes = uint32_t(nnzb) * 512, x_bytes = uint32_t(p.k * p.n) * 2;
  auto load_bulk = [&](int64_t u, int s) {
    T *As = stages + s * selems;
    cu::fence_proxy_async_shared();  // the stage's last reads (generic) before the copies' writes
    cu::mbar_arrive_expect_tx(&full[s], a_bytes + x_bytes);
    if (a_bytes) cu::bulk_load(As, val + u * p.nnzb * 256, a_bytes, &full[s]);
    if (x_bytes) cu::bulk_load(As + int64_t(nnzb) * 256, X + u * p.x_stride, x_bytes, &full[s]);
  };

  // S stages: units u, u + G, ..., u + (S - 2) G are in flight while u is multiplied
  const int64_t G = gridDim.x;
  for (int i = 0; i < S - 1; ++i) {
    if constexpr (BULK) {
      if (tid == 0 && blockIdx.x + i * G < total) load_bulk(blockIdx.x + i * G, i);
    } else {
      if (blockIdx.x + i * G < total) load(blockIdx.x + i * G, i);
      cu::cp_async_commit();
    }
  }
  int s = 0;
  uint32_t phase = 0;  // (BULK) the parity of stage s's fill being waited for
  for (int64_t u = blockIdx.x; u < total; u += G) {
    const int64_t ahead = u + (S - 1) * G;
    const int freed = s == 0 ? S - 1 : s - 1;  // the stage freed last iteration
    if constexpr (BULK) {
      if (tid == 0 && ahead < total) load_bulk(ahead, freed);
      cu::mbar_wait_parity(&full[s], phase);
    } else {
      if (ahead < total) load(ahead, freed);
      cu::cp_async_commit();
      cu::cp_async_wait<S - 1>();
      __syncthreads();
    }
    const T *As = stages + s * selems;
    const T *Xs = As + int64_t(nnzb) * 256;
    const int64_t item = u / ntn;
    const int64_t col0 = (u % ntn) * NT;
    T *Cg = C + item * p.c_stride;
    const int g = lane >> 2, t = lane & 3;
    // the lane's ldmatrix rows: A (x4: rows 0-7 / 8-15, k 0-7 / 8-15), X (x4.trans: k rows)
    const int arow = (lane & 7) + ((lane >> 3) & 1) * 8;
    const int a_off = BULK ? arow * 16 + (lane >> 4) * 8 : swizzled_chunk(arow, lane >> 4) * 8;
    for (int task = warp; task < rb * NSTRIP; task += kThreads / 32) {
      const int r = task / NSTRIP, n0 = (task % NSTRIP) * WN;
      float acc[WN / 8][4];
#pragma unroll
      for (int j = 0; j < WN / 8; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[j][v] = 0.f;
      const int end = s_rp[r + 1];
      for (int b = s_rp[r]; b < end; ++b) {
        uint32_t a[4];
        cu::ldsm_x4(a, As + b * 256 + a_off);
        if constexpr (WN == 8) {
          uint32_t x0, x1;  // (the addresses of lanes 16-31 are not read)
          cu::ldsm_x2_trans(x0, x1, Xs + (s_col[b] * 16 + (lane & 15)) * XP);
          cu::mma_16816<BF16>(acc[0], a, x0, x1);
        }
        const T *xrow = Xs + (s_col[b] * 16 + (lane & 15)) * XP + n0 + (lane >> 4) * 8;
#pragma unroll
        for (int jp = 0; jp < WN / 16; ++jp) {
          uint32_t x[4];
          cu::ldsm_x4_trans(x, xrow + jp * 16);
          cu::mma_16816<BF16>(acc[2 * jp], a, x[0], x[1]);
          cu::mma_16816<BF16>(acc[2 * jp + 1], a, x[2], x[3]);
        }
      }
      const float alpha = float(p.alpha);
      if (stage_c) {
#pragma unroll
        for (int j = 0; j < WN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<T2 *>(cs + (g + h * 8) * CP + j * 8 + 2 * t) =
                Elem<BF16>::pack(alpha * acc[j][2 * h], alpha * acc[j][2 * h + 1]);
        __syncwarp();
        constexpr int CH = WN / 8;  // 16-byte pieces per row of the strip
#pragma unroll
        for (int c = lane; c < 16 * CH; c += 32) {
          const int rr = c / CH, cc = c % CH;
          const int64_t row = int64_t(r) * 16 + rr, col = col0 + n0 + cc * 8;
          if (row >= p.m || col >= p.n) continue;  // n = 4 or a multiple of 8: a piece is in
                                                   // or out whole
          if (NT == 8 && p.n == 4)
            *reinterpret_cast<uint2 *>(Cg + row * p.ldc + col) =
                *reinterpret_cast<const uint2 *>(cs + rr * CP);
          else
            *reinterpret_cast<uint4 *>(Cg + row * p.ldc + col) =
                *reinterpret_cast<const uint4 *>(cs + rr * CP + cc * 8);
        }
        __syncwarp();  // the scratch is rewritten by the warp's next task
        continue;
      }
#pragma unroll
      for (int j = 0; j < WN / 8; ++j) {
        const int64_t col = col0 + n0 + j * 8 + 2 * t;
        if (col >= p.n) continue;  // n is a multiple of 8: the pair is in or out together
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = int64_t(r) * 16 + g + h * 8;
          if (row < p.m)
            *reinterpret_cast<T2 *>(Cg + row * p.ldc + col) =
                Elem<BF16>::pack(alpha * acc[j][2 * h], alpha * acc[j][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // stage s is refilled by the next iteration's copies
    if (++s == S) s = 0, phase ^= 1;
  }
  if constexpr (!BULK) cu::cp_async_wait_all();  // (BULK: every copy issued was waited for)
}

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("blocksparse batched ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

int64_t stage_bytes(int64_t m, int64_t k, int64_t nnzb, int nt, bool bulk) {
  return stage_elems(nnzb, (k + 15) / 16 * 16, nt, bulk) * 2;
}
// Whether C goes through the warps' shared-memory scratch (1, the default) or straight from
// the fragments (0, the first version, to compare).
std::atomic<int> g_stage_c{1};
// The narrow right-hand sides' forms, bits (for comparisons; 3, the default): bit 0 the 8-column
// tile for n of 5-8 (else 16 columns), bit 1 bulk loads.  n <= 4 always takes the 8-column tile,
// the one form that reads rows of 8 bytes: no setting makes a signature the kernel ran before
// unrunnable (a replay made under one form stays valid under the others).
std::atomic<int> g_narrow{3};

// (the mbarriers of BULK follow the C scratch, which is then always there)
int64_t smem_bytes(int64_t m, int64_t k, int64_t nnzb, int nt, int stages, bool bulk) {
  return index_bytes((m + 15) / 16, nnzb) + stages * stage_bytes(m, k, nnzb, nt, bulk) +
         (g_stage_c.load(std::memory_order_relaxed) || bulk ? c_scratch_bytes(nt) : 0) +
         (bulk ? 8 * 4 : 0);
}

// The widest tile tile_n may take (64; 32 or 16 to compare narrower tiles), and the pipeline
// (0: the depth that keeps the most bytes in flight; 1: two stages, the first version, to
// compare: within 4 % of each other in every case measured, C's stores bound both).
std::atomic<int> g_tile_cap{64};
std::atomic<int> g_pipeline{0};

struct Config {
  int nt = 0, stages = 0;
  bool bulk = false;
};

// The RHS tile: 8 columns for n <= 8, else the widest (64, 32 or 16 columns, no wider than n
// rounded up to 16) whose two stages fit in a CTA's shared memory; bulk loads where they apply
// (n = the tile's 8 or 16 columns, compute capability 9.0, `packed`: the caller's X rows are
// n apart); then the depth (2-4 stages) that keeps the most bytes in flight per SM: (CTAs an
// SM holds, by shared memory and by registers, at most 5 of 256 threads) x (stages - 1) x stage.
Config configure(int dtype, int64_t m, int64_t k, int64_t n, int64_t nnzb, bool packed) {
  Config c;
  if ((dtype != 2 && dtype != 3) || m < 1 || k < 0 || n < 1 || m > kMaxOrder || k > kMaxOrder ||
      nnzb < 0 || nnzb > ((m + 15) / 16) * ((k + 15) / 16))
    return c;
  DeviceInfo d;
  const bool ok = query_device(&d) == cudaSuccess;
  const int64_t limit = ok ? d.smem_optin : 227 * 1024, per_sm = ok ? d.smem_sm : 228 * 1024;
  const int narrow = g_narrow.load(std::memory_order_relaxed);
  const int64_t want = (n + 15) / 16 * 16;
  const int cap = g_tile_cap.load(std::memory_order_relaxed);
  for (int nt : {8, 64, 32, 16}) {  // (8 first: n <= 8 takes it where it is allowed)
    const bool fits =
        nt == 8 ? n <= 4 || (n <= 8 && (narrow & 1)) : (nt <= want || nt == 16) && nt <= cap;
    if (!fits) continue;
    c.bulk = (narrow & 2) && packed && n == nt && nt <= 16 && ok && d.cc_major >= 9;
    if (smem_bytes(m, k, nnzb, nt, 2, c.bulk) <= limit) {
      c.nt = nt;
      break;
    }
  }
  if (c.nt == 0) return c;
  c.stages = 2;
  if (g_pipeline.load(std::memory_order_relaxed) == 1) return c;
  const int64_t st = stage_bytes(m, k, nnzb, c.nt, c.bulk);
  int64_t best = -1;
  for (int stages : {2, 3, 4}) {
    const int64_t smem = smem_bytes(m, k, nnzb, c.nt, stages, c.bulk);
    if (smem > limit) break;
    int64_t ctas = per_sm / (smem + 1024);
    if (ctas > 5) ctas = 5;
    const int64_t inflight = ctas * (stages - 1) * st;
    if (inflight > best) {
      best = inflight;
      c.stages = stages;
    }
  }
  return c;
}

template <bool BF16, int NT, int S, bool BULK>
int launch(const kl_bs_batched_problem &p, cudaStream_t stream) {
  const void *kernel = reinterpret_cast<const void *>(batched_kernel<BF16, NT, S, BULK>);
  const int smem = int(smem_bytes(p.m, p.k, p.nnzb, NT, S, BULK));
  // (the opt-in and the resident CTAs, per kernel and device: cuda_device.hpp)
  cudaError_t e = opt_in_smem(kernel, smem);
  if (e != cudaSuccess) return cuda_fail(e, "shared memory");
  int resident = 0;
  if ((e = resident_blocks(kernel, kThreads, smem, &resident)) != cudaSuccess)
    return cuda_fail(e, "occupancy");
  const int64_t ntn = (p.n + NT - 1) / NT;
  const int64_t units = p.batch * ntn;
  const int64_t grid = units < resident ? units : resident;
  // C goes through 16-byte (n = 4: 8-byte) stores when every row piece is so aligned
  const int piece = p.n == 4 ? 4 : 8;
  const bool stage_c = g_stage_c.load(std::memory_order_relaxed) && p.ldc % piece == 0 &&
                       p.c_stride % piece == 0 &&
                       reinterpret_cast<uintptr_t>(p.C) % (2 * piece) == 0;
  batched_kernel<BF16, NT, S, BULK><<<unsigned(grid), kThreads, size_t(smem), stream>>>(
      p, ntn, stage_c);
  e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "launch");
}

template <bool BF16, int NT, bool BULK>
int launch_nt(const kl_bs_batched_problem &p, const Config &c, cudaStream_t s) {
  switch (c.stages) {
    case 2: return launch<BF16, NT, 2, BULK>(p, s);
    case 3: return launch<BF16, NT, 3, BULK>(p, s);
    case 4: return launch<BF16, NT, 4, BULK>(p, s);
  }
  return fail(KL_ERR_INVALID, "blocksparse batched (CUDA): no pipeline for this problem");
}

template <bool BF16>
int launch_dtype(const kl_bs_batched_problem &p, const Config &c, cudaStream_t s) {
  switch (c.nt) {
    case 64: return launch_nt<BF16, 64, false>(p, c, s);
    case 32: return launch_nt<BF16, 32, false>(p, c, s);
    case 16: return c.bulk ? launch_nt<BF16, 16, true>(p, c, s) : launch_nt<BF16, 16, false>(p, c, s);
    case 8: return c.bulk ? launch_nt<BF16, 8, true>(p, c, s) : launch_nt<BF16, 8, false>(p, c, s);
  }
  return fail(KL_ERR_INVALID, "blocksparse batched (CUDA): no kernel for this problem");
}

}  // namespace bsb
}  // namespace kl

extern "C" int kl_bs_batched_tile_cap(int cap) {
  const int prev = kl::bsb::g_tile_cap.load();
  if (cap == 16 || cap == 32 || cap == 64) kl::bsb::g_tile_cap.store(cap);
  return prev;
}

extern "C" int kl_bs_batched_pipeline(int pipeline) {
  const int prev = kl::bsb::g_pipeline.load();
  if (pipeline == 0 || pipeline == 1) kl::bsb::g_pipeline.store(pipeline);
  return prev;
}

extern "C" int kl_bs_batched_narrow(int forms) {
  const int prev = kl::bsb::g_narrow.load();
  if (forms >= 0 && forms <= 3) kl::bsb::g_narrow.store(forms);
  return prev;
}

extern "C" int kl_bs_batched_c_stage(int stage) {
  const int prev = kl::bsb::g_stage_c.load();
  if (stage == 0 || stage == 1) kl::bsb::g_stage_c.store(stage);
  return prev;
}

extern "C" int kl_bs_batched_cuda_tile_n(int dtype, int64_t m, int64_t k, int64_t n,
                                         int64_t nnzb) {
  return kl::bsb::configure(dtype, m, k, n, nnzb, true).nt;
}

extern "C" int kl_bs_batched_cuda(const kl_bs_batched_problem *p, int dtype, void *stream) {
  using namespace kl::bsb;
  if (!p || p->batch < 0 || p->m < 0 || p->k < 0 || p->n < 0 || p->nnzb < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): invalid problem");
  if (p->batch == 0 || p->m == 0 || p->n == 0) return KL_OK;
  const Config c = configure(dtype, p->m, p->k, p->n, p->nnzb, p->ldx == p->n);
  if (c.nt == 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): FP16/BF16, orders up to 256 "
                                    "whose blocks and X tile fit in shared memory");
  // n = 4: rows of 8 bytes (8-byte copies of X's rows, the 8-column tile)
  const int64_t q = p->n == 4 && c.nt == 8 ? 4 : 8;
  if (p->n % q || p->ldx % q || p->x_stride % q || p->ldc % 2 || p->c_stride % 2 ||
      (reinterpret_cast<uintptr_t>(p->X) | reinterpret_cast<uintptr_t>(p->val)) % 16 ||
      reinterpret_cast<uintptr_t>(p->C) % 4)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): n, ldx and the X stride must be "
                                    "multiples of 8 (or n = 4 and multiples of 4), X and val "
                                    "16-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return dtype == 3 ? launch_dtype<true>(*p, c, s) : launch_dtype<false>(*p, c, s);
}
