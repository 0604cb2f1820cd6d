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
__host__ __device__ inline int64_t stage_elems(int64_t nnzb, int64_t kpad, int nt) {
  return nnzb * 256 + kpad * (nt + 8);
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

template <bool BF16, int NT, int S>
__global__ void __launch_bounds__(kThreads)
    batched_kernel(kl_bs_batched_problem p, int64_t ntn, bool stage_c) {
  using T = typename Elem<BF16>::T;
  using T2 = typename Elem<BF16>::T2;
  constexpr int WN = strip_cols(NT);  // columns of a warp's strip
  constexpr int NSTRIP = NT / WN;
  constexpr int XP = NT + 8;
  KL_DYNAMIC_SMEM(smem_raw);
  const int rb = int((p.m + 15) / 16), cb = int((p.k + 15) / 16);
  const int kpad = cb * 16, nnzb = int(p.nnzb);
  int *s_rp = reinterpret_cast<int *>(smem_raw);
  int *s_col = s_rp + rb + 1;
  T *stages = reinterpret_cast<T *>(smem_raw + index_bytes(rb, nnzb));
  const int64_t selems = stage_elems(nnzb, kpad, NT);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int CP = WN + 8;  // the C scratch's pitch
  T *cs = stages + S * selems + warp * 16 * CP;  // this warp's (only when stage_c)
  for (int i = tid; i <= rb; i += kThreads) s_rp[i] = int(p.row_ptr[i]);
  for (int i = tid; i < nnzb; i += kThreads) s_col[i] = int(p.col_idx[i]);

  const T *val = static_cast<const T *>(p.val);
  const T *X = static_cast<const T *>(p.X);
  T *C = static_cast<T *>(p.C);
  const int64_t total = p.batch * ntn;
  const int a_chunks = nnzb * 32, x_row_chunks = NT / 8, x_chunks = kpad * x_row_chunks;

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
      cu::cp_async_16(Xs + r * XP + cc * 8, ok ? Xg + r * p.ldx + col : Xg, ok);
    }
  };

  // S stages: units u, u + G, ..., u + (S - 2) G are in flight while u is multiplied
  const int64_t G = gridDim.x;
  for (int i = 0; i < S - 1; ++i) {
    if (blockIdx.x + i * G < total) load(blockIdx.x + i * G, i);
    cu::cp_async_commit();
  }
  int s = 0;
  for (int64_t u = blockIdx.x; u < total; u += G, s = s + 1 == S ? 0 : s + 1) {
    const int64_t ahead = u + (S - 1) * G;
    if (ahead < total) load(ahead, s == 0 ? S - 1 : s - 1);  // the stage freed last iteration
    cu::cp_async_commit();
    cu::cp_async_wait<S - 1>();
    __syncthreads();
    const T *As = stages + s * selems;
    const T *Xs = As + int64_t(nnzb) * 256;
    const int64_t item = u / ntn;
    const int64_t col0 = (u % ntn) * NT;
    T *Cg = C + item * p.c_stride;
    const int g = lane >> 2, t = lane & 3;
    // the lane's ldmatrix rows: A (x4: rows 0-7 / 8-15, k 0-7 / 8-15), X (x4.trans: k rows)
    const int arow = (lane & 7) + ((lane >> 3) & 1) * 8;
    const int a_off = swizzled_chunk(arow, lane >> 4) * 8;
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
          if (row < p.m && col < p.n)  // n is a multiple of 8: a piece is in or out whole
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
  }
  cu::cp_async_wait_all();
}

int cuda_fail(cudaError_t e, const char *what) {
  std::string msg = std::string("blocksparse batched ") + what + ": " + cudaGetErrorString(e);
  return fail(KL_ERR_CUDA, msg.c_str());
}

int64_t stage_bytes(int64_t m, int64_t k, int64_t nnzb, int nt) {
  return stage_elems(nnzb, (k + 15) / 16 * 16, nt) * 2;
}
// Whether C goes through the warps' shared-memory scratch (1, the default) or straight from
// the fragments (0, the first version, to compare).
std::atomic<int> g_stage_c{1};

int64_t smem_bytes(int64_t m, int64_t k, int64_t nnzb, int nt, int stages) {
  return index_bytes((m + 15) / 16, nnzb) + stages * stage_bytes(m, k, nnzb, nt) +
         (g_stage_c.load(std::memory_order_relaxed) ? c_scratch_bytes(nt) : 0);
}

// The widest tile tile_n may take (64; 32 or 16 to compare narrower tiles), and the pipeline
// (0: the depth that keeps the most bytes in flight; 1: two stages, the first version, to
// compare: within 4 % of each other in every case measured, C's stores bound both).
std::atomic<int> g_tile_cap{64};
std::atomic<int> g_pipeline{0};

struct Config {
  int nt = 0, stages = 0;
};

// The widest RHS tile (64, 32 or 16 columns, no wider than n rounded up to 16) whose two stages
// fit in a CTA's shared memory, then the depth (2-4 stages) that keeps the most bytes in flight
// per SM: (CTAs an SM holds, by shared memory and by registers, at most 5 of 256 threads) x
// (stages - 1) x stage.
Config configure(int dtype, int64_t m, int64_t k, int64_t n, int64_t nnzb) {
  Config c;
  if ((dtype != 2 && dtype != 3) || m < 1 || k < 0 || n < 1 || m > kMaxOrder || k > kMaxOrder ||
      nnzb < 0 || nnzb > ((m + 15) / 16) * ((k + 15) / 16))
    return c;
  DeviceInfo d;
  const bool ok = query_device(&d) == cudaSuccess;
  const int64_t limit = ok ? d.smem_optin : 227 * 1024, per_sm = ok ? d.smem_sm : 228 * 1024;
  const int64_t want = (n + 15) / 16 * 16;
  const int cap = g_tile_cap.load(std::memory_order_relaxed);
  for (int nt : {64, 32, 16})
    if ((nt <= want || nt == 16) && nt <= cap && smem_bytes(m, k, nnzb, nt, 2) <= limit) {
      c.nt = nt;
      break;
    }
  if (c.nt == 0) return c;
  c.stages = 2;
  if (g_pipeline.load(std::memory_order_relaxed) == 1) return c;
  const int64_t st = stage_bytes(m, k, nnzb, c.nt);
  int64_t best = -1;
  for (int stages : {2, 3, 4}) {
    const int64_t smem = smem_bytes(m, k, nnzb, c.nt, stages);
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

template <bool BF16, int NT, int S>
int launch(const kl_bs_batched_problem &p, cudaStream_t stream) {
  auto kernel = batched_kernel<BF16, NT, S>;
  const int64_t smem = smem_bytes(p.m, p.k, p.nnzb, NT, S);
  static int64_t configured = 0;  // the largest size set so far (a benign race: sets only grow)
  cudaError_t e;
  if (smem > configured) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return cuda_fail(e, "shared memory");
    configured = smem;
  }
  DeviceInfo d;
  if ((e = query_device(&d)) != cudaSuccess) return cuda_fail(e, "device");
  // CTAs an SM holds at this shared-memory size, remembered for the last size asked
  static std::atomic<int64_t> occupancy{-1};  // smem << 8 | CTAs per SM
  int64_t known = occupancy.load(std::memory_order_relaxed);
  int per_sm = 0;
  if (known >= 0 && (known >> 8) == smem) {
    per_sm = int(known & 255);
  } else {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, size_t(smem));
    if (e != cudaSuccess) return cuda_fail(e, "occupancy");
    occupancy.store(smem << 8 | (per_sm & 255), std::memory_order_relaxed);
  }
  const int64_t ntn = (p.n + NT - 1) / NT;
  const int64_t units = p.batch * ntn;
  int64_t grid = int64_t(d.sms) * (per_sm > 0 ? per_sm : 1);
  if (grid > units) grid = units;
  // C goes through 16-byte stores when every row piece is 16-byte aligned
  const bool stage_c = g_stage_c.load(std::memory_order_relaxed) && p.ldc % 8 == 0 &&
                       p.c_stride % 8 == 0 && reinterpret_cast<uintptr_t>(p.C) % 16 == 0;
  kernel<<<unsigned(grid), kThreads, size_t(smem), stream>>>(p, ntn, stage_c);
  e = cudaGetLastError();
  return e == cudaSuccess ? KL_OK : cuda_fail(e, "launch");
}

template <bool BF16, int NT>
int launch_nt(const kl_bs_batched_problem &p, const Config &c, cudaStream_t s) {
  switch (c.stages) {
    case 2: return launch<BF16, NT, 2>(p, s);
    case 3: return launch<BF16, NT, 3>(p, s);
    case 4: return launch<BF16, NT, 4>(p, s);
  }
  return fail(KL_ERR_INVALID, "blocksparse batched (CUDA): no pipeline for this problem");
}

template <bool BF16>
int launch_dtype(const kl_bs_batched_problem &p, const Config &c, cudaStream_t s) {
  switch (c.nt) {
    case 64: return launch_nt<BF16, 64>(p, c, s);
    case 32: return launch_nt<BF16, 32>(p, c, s);
    case 16: return launch_nt<BF16, 16>(p, c, s);
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

extern "C" int kl_bs_batched_c_stage(int stage) {
  const int prev = kl::bsb::g_stage_c.load();
  if (stage == 0 || stage == 1) kl::bsb::g_stage_c.store(stage);
  return prev;
}

extern "C" int kl_bs_batched_cuda_tile_n(int dtype, int64_t m, int64_t k, int64_t n,
                                         int64_t nnzb) {
  return kl::bsb::configure(dtype, m, k, n, nnzb).nt;
}

extern "C" int kl_bs_batched_cuda(const kl_bs_batched_problem *p, int dtype, void *stream) {
  using namespace kl::bsb;
  if (!p || p->batch < 0 || p->m < 0 || p->k < 0 || p->n < 0 || p->nnzb < 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): invalid problem");
  if (p->batch == 0 || p->m == 0 || p->n == 0) return KL_OK;
  const Config c = configure(dtype, p->m, p->k, p->n, p->nnzb);
  if (c.nt == 0)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): FP16/BF16, orders up to 256 "
                                    "whose blocks and X tile fit in shared memory");
  if (p->n % 8 || p->ldx % 8 || p->x_stride % 8 || p->ldc % 2 || p->c_stride % 2 ||
      (reinterpret_cast<uintptr_t>(p->X) | reinterpret_cast<uintptr_t>(p->val)) % 16 ||
      reinterpret_cast<uintptr_t>(p->C) % 4)
    return kl::fail(KL_ERR_INVALID, "blocksparse batched (CUDA): n, ldx and the X stride must be "
                                    "multiples of 8, X and val 16-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return dtype == 3 ? launch_dtype<true>(*p, c, s) : launch_dtype<false>(*p, c, s);
}
