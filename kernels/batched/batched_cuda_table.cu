// The variable form's problem table (kl_batched_entry rows) built on the GPU from a size table
// there, for kl_batched_var_table_cuda (batched.h).
//
// Why a kernel: built from the size table with the array library's operations (exclusive sums
// of m k, k n and m n for the offsets, the bounds checks, fifteen columns stacked), one call of
// 10^4 products ran ~48 small kernels, 0.17 ms of its GPU time (H100, 2026-11-27: a fifth of what
// the 128 x 128 kernel itself took on products a multiple of 8), and as many host calls.  Here:
// one launch up to 1,024 products, two beyond (the per-block sums, then each block scans its
// rows from the sums of the blocks before it).
#include <cuda_runtime.h>

#include <cstdio>

#include "batched.h"

namespace kl {
namespace batched {
namespace {

constexpr int kThreads = 256, kPer = 4, kRows = kThreads * kPer, kWarps = kThreads / 32;

struct Triple {
  long long ak, kb, mn;  // elements of A, B and D a product (the packed offsets' steps)
};

__device__ __forceinline__ Triple add(Triple x, Triple y) {
  return {x.ak + y.ak, x.kb + y.kb, x.mn + y.mn};
}

__device__ __forceinline__ Triple shfl_up(Triple x, int d) {
  return {__shfl_up_sync(0xffffffffu, x.ak, d), __shfl_up_sync(0xffffffffu, x.kb, d),
          __shfl_up_sync(0xffffffffu, x.mn, d)};
}

// Row i's steps (m k, k n, m n: the products of the sizes as given, negative ones included, as
// the host's exclusive sums take them).
__device__ __forceinline__ Triple steps(const int64_t *sizes, int ncols, int64_t i) {
  const int64_t m = sizes[i * ncols], n = sizes[i * ncols + 1], k = sizes[i * ncols + 2];
  return {m * k, k * n, m * n};
}

// The block's exclusive prefix of each thread's kPer rows (rows kRows b .. kRows (b + 1) - 1):
// warp scans, then the warps' totals.  Returns this thread's exclusive prefix; *total the block's.
__device__ Triple block_scan(Triple mine, Triple *total) {
  __shared__ Triple warp_sum[kWarps];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  Triple inc = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const Triple up = shfl_up(inc, d);
    if (lane >= d) inc = add(inc, up);
  }
  if (lane == 31) warp_sum[warp] = inc;
  __syncthreads();
  Triple before{0, 0, 0}, all{0, 0, 0};
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before = add(before, warp_sum[w]);
    all = add(all, warp_sum[w]);
  }
  __syncthreads();  // (warp_sum is reused by the caller's next scan)
  *total = all;
  return {before.ak + inc.ak - mine.ak, before.kb + inc.kb - mine.kb, before.mn + inc.mn - mine.mn};
}

__device__ Triple thread_rows(const int64_t *sizes, int ncols, int64_t count, int64_t first) {
  Triple t{0, 0, 0};
#pragma unroll
  for (int r = 0; r < kPer; ++r)
    if (first + r < count) t = add(t, steps(sizes, ncols, first + r));
  return t;
}

// Each block's sums of its rows' steps (only where the offsets are computed: three columns).
__global__ void __launch_bounds__(kThreads) table_sums(const int64_t *sizes, int ncols,
                                                       int64_t count, Triple *block_sums) {
  const int64_t first = int64_t(blockIdx.x) * kRows + int64_t(threadIdx.x) * kPer;
  Triple total;
  block_scan(thread_rows(sizes, ncols, count, first), &total);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = total;
}

struct Buffers {
  int64_t a, a_len, b, b_len, c, c_len, d, d_len, elem;  // addresses and lengths (elements)
};

// The table's rows, exactly as the host's construction (batched_variable.py) makes them: packed
// offsets (the exclusive sums, or the given columns 3-5), then rows whose output or C leaves its
// buffer get m = 0 (not computed) and rows whose A or B leaves its buffer k = 0 (an empty
// product: zeros, or beta C).
__global__ void __launch_bounds__(kThreads) table_write(const int64_t *sizes, int ncols,
                                                        int64_t count, const Triple *block_sums,
                                                        Buffers buf, int64_t *table) {
  const int tid = int(threadIdx.x);
  const int64_t first = int64_t(blockIdx.x) * kRows + int64_t(tid) * kPer;
  Triple off{0, 0, 0};
  if (ncols == 3) {
    // the blocks before this one (their sums, added by the block's threads together)
    Triple prev{0, 0, 0};
    for (int64_t j = tid; j < int64_t(blockIdx.x); j += kThreads) prev = add(prev, block_sums[j]);
    Triple prev_all, total;
    block_scan(prev, &prev_all);  // (every thread gets the total)
    off = add(block_scan(thread_rows(sizes, ncols, count, first), &total), prev_all);
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int64_t i = first + r;
    if (i >= count) break;
    int64_t m = sizes[i * ncols], n = sizes[i * ncols + 1], k = sizes[i * ncols + 2];
    int64_t ao, bo, dof;
    if (ncols == 3) {
      ao = off.ak, bo = off.kb, dof = off.mn;
      const Triple s = steps(sizes, ncols, i);
      off = add(off, s);
    } else {
      ao = sizes[i * ncols + 3], bo = sizes[i * ncols + 4], dof = sizes[i * ncols + 5];
    }
    const bool bad_d = m < 0 || n < 0 || dof < 0 || dof + m * n > buf.d_len ||
                       (buf.c && dof + m * n > buf.c_len);
    const bool bad_ab = k < 0 || ao < 0 || bo < 0 || ao + m * k > buf.a_len ||
                        bo + k * n > buf.b_len;
    if (bad_d) m = 0;
    if (bad_ab) k = 0;
    const bool has_c = buf.c != 0;
    int64_t *row = table + i * 15;
    row[0] = m, row[1] = n, row[2] = k;
    row[3] = buf.a + ao * buf.elem, row[4] = k, row[5] = 1;
    row[6] = buf.b + bo * buf.elem, row[7] = n, row[8] = 1;
    row[9] = has_c ? buf.c + dof * buf.elem : 0, row[10] = has_c ? n : 0, row[11] = has_c ? 1 : 0;
    row[12] = buf.d + dof * buf.elem, row[13] = n, row[14] = 1;
  }
}

}  // namespace
}  // namespace batched
}  // namespace kl

extern "C" int kl_batched_var_table_cuda(const int64_t *sizes, int ncols, int64_t count,
                                         const void *a, int64_t a_len, const void *b,
                                         int64_t b_len, const void *c, int64_t c_len, void *d,
                                         int64_t d_len, int elem, int64_t *table, void *stream) {
  using namespace kl;
  using namespace kl::batched;
  if (count < 0 || (ncols != 3 && ncols != 6) || elem <= 0 || (count > 0 && (!sizes || !table)))
    return fail(KL_ERR_INVALID, "batched_matmul_cuda: invalid size table");
  if (count == 0) return KL_OK;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t blocks = (count + kRows - 1) / kRows;
  const Buffers buf{int64_t(reinterpret_cast<uintptr_t>(a)), a_len,
                    int64_t(reinterpret_cast<uintptr_t>(b)), b_len,
                    int64_t(reinterpret_cast<uintptr_t>(c)), c_len,
                    int64_t(reinterpret_cast<uintptr_t>(d)), d_len, elem};
  void *sums = nullptr;
  cudaError_t e = cudaSuccess;
  if (ncols == 3 && blocks > 1) {
    e = cudaMallocAsync(&sums, size_t(blocks) * sizeof(Triple), s);
    if (e == cudaSuccess) {
      table_sums<<<unsigned(blocks), kThreads, 0, s>>>(sizes, ncols, count,
                                                      static_cast<Triple *>(sums));
      e = cudaGetLastError();
    }
  }
  if (e == cudaSuccess) {
    table_write<<<unsigned(blocks), kThreads, 0, s>>>(sizes, ncols, count,
                                                     static_cast<const Triple *>(sums), buf, table);
    e = cudaGetLastError();
  }
  if (sums) (void)cudaFreeAsync(sums, s);
  if (e != cudaSuccess) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "batched_matmul: size table: %s", cudaGetErrorString(e));
    return fail(KL_ERR_CUDA, msg);
  }
  return KL_OK;
}
