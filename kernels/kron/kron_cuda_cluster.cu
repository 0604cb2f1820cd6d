// x @ (F_0 ⊗ … ⊗ F_5) for six 8 × 8 float32 factors in ONE pass over memory: each row of x
// (8^6 elements, 1 MB) is spread over a cluster of 16 thread blocks (64 KB each, distributed
// shared memory), so that no intermediate goes to DRAM — two passes cannot beat 1.45 ms on
// 1024 × 8^6 (x and y twice at 2.96 TB/s), one pass is bounded by 0.725 ms.
//
// Block r of a cluster holds the contiguous 16th of the row with first mode p0 = r / 2 and
// second mode p1 in [4 (r % 2), 4 (r % 2) + 4): [p1 (4)][p2][p3][p4][p5] (8 each).  It
// contracts modes 5, 4, 3, 2 in place in its own shared memory (a step: every fibre of 8 along
// the mode times the factor, CUDA-core FMAs, the factor in registers), then the blocks exchange:
// block s receives, from every block, the 256 consecutive (q2, q3, q4, q5) of its share for each
// of that block's (p0, p1), into [p0 (8)][p1 (8)][256]; it contracts modes 1 and 0 there and
// writes its 64 runs of 256 outputs to y.  Two chunk buffers: the next row's chunk loads
// (cp.async) while this one is worked on.  Clusters are persistent, one row at a time.
// Buffers hold 8 floats of padding after every 64, so that the stride-8 step's fibres in a warp
// (four 64-blocks) fall in distinct banks.
//
// Measured on an H100 (1024 × 8^6): 2.16 ms, the two-pass plan's time (Nsight Compute: the six
// steps ~56 % of the warps' time at 8 warps an SM, the exchange and its two cluster barriers
// ~30 %, y ~9 %).  So it is taken only with KRONLINALG_KRON_CLUSTER=1; a version moving every
// copy with bulk (TMA) copies was slower (2.37 ms): docs/attempts/2026-11-26-kron-cluster-*.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda_device.hpp"
#include "knobs.hpp"
#include "cuda_ptx.cuh"
#include "kron.h"
#include "kron_cuda_common.cuh"

namespace kl {
namespace cu {

namespace {

constexpr int kP = 8, kN = 6, kCluster = 16, kThreads = 256;
constexpr int kChunk = 262144 / kCluster;  // 16384 elements of a row a block
constexpr int kRun = 256;                  // elements of one exchanged (or written) run

// Position in a padded buffer of element e.
__host__ __device__ constexpr int padded(int e) { return e + ((e >> 6) << 3); }

constexpr int kChunkPad = padded(kChunk);
constexpr int kSmemBytes = (3 * kChunkPad + kN * kP * kP) * 4;  // 218 KB

struct ClusterP {
  const float *x;
  float *y;
  int64_t m1, m2, x_rs1, x_rs2, y_rs1, y_rs2;
  const float *F[kN];
  int64_t F_rs[kN], F_cs[kN];
  float alpha, beta;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// One step: every fibre of 8 elements at logical `kStride` in the 16384 of the padded `buf` times
// factor f (8 × 8, row p, column q), in place.  A thread takes 8 fibres; neighbouring threads
// neighbouring fibres.
template <int kStride>
__device__ __forceinline__ void contract(float *buf, const float *f) {
  constexpr int kPadStride = kStride < 64 ? kStride : padded(kStride);
  float w[kP * kP];
#pragma unroll
  for (int e = 0; e < kP * kP; ++e) w[e] = f[e];
  // stride 1: a fibre is two float4; threads 4-7 of each 8 take them in the other order, so that
  // each quarter warp's 16-byte accesses cover the 32 banks once
  const int h = (threadIdx.x >> 2) & 1;
#pragma unroll 2
  for (int u = 0; u < kChunk / kP / kThreads; ++u) {
    const int fibre = threadIdx.x + u * kThreads;
    float *base = buf + padded((fibre / kStride) * (kP * kStride) + fibre % kStride);
    float in[kP], out[kP];
    if constexpr (kStride == 1) {
      const float4 a = reinterpret_cast<const float4 *>(base)[h];
      const float4 b = reinterpret_cast<const float4 *>(base)[h ^ 1];
      *reinterpret_cast<float4 *>(in) = h ? b : a;
      *reinterpret_cast<float4 *>(in + 4) = h ? a : b;
    } else {
#pragma unroll
      for (int j = 0; j < kP; ++j) in[j] = base[j * kPadStride];
    }
#pragma unroll
    for (int q = 0; q < kP; ++q) {
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < kP; ++j) acc = fmaf(in[j], w[j * kP + q], acc);
      out[q] = acc;
    }
    if constexpr (kStride == 1) {
      const float4 a = *reinterpret_cast<const float4 *>(out);
      const float4 b = *reinterpret_cast<const float4 *>(out + 4);
      reinterpret_cast<float4 *>(base)[h] = h ? b : a;
      reinterpret_cast<float4 *>(base)[h ^ 1] = h ? a : b;
    } else {
#pragma unroll
      for (int q = 0; q < kP; ++q) base[q * kPadStride] = out[q];
    }
  }
}

__device__ __forceinline__ const float *row_of(const float *base, int64_t m, int64_t m2,
                                               int64_t rs1, int64_t rs2) {
  return base + (m / m2) * rs1 + (m % m2) * rs2;
}

#endif

__global__ void __launch_bounds__(kThreads, 1) kron_cluster_8x6(ClusterP p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank()), t = threadIdx.x;
  const int64_t clusters = gridDim.x / kCluster, first = blockIdx.x / kCluster;
  const int64_t M = p.m1 * p.m2;
  extern __shared__ __align__(16) float chunks[];  // two chunk buffers, then B, then F
  float *B = chunks + 2 * kChunkPad, *F = B + kChunkPad;
  for (int i = t; i < kN * kP * kP; i += kThreads) {  // (alpha folded into factor 0)
    const int k = i / (kP * kP), e = i % (kP * kP);
    F[i] = p.F[k][(e / kP) * p.F_rs[k] + (e % kP) * p.F_cs[k]] * (k == 0 ? p.alpha : 1.f);
  }
  auto load = [&](float *dst, int64_t m) {  // this block's chunk of row m (one commit group)
    if (m < M) {
      const float *src = row_of(p.x, m, p.m2, p.x_rs1, p.x_rs2) + int64_t(rank) * kChunk;
      for (int v = t; v < kChunk / 4; v += kThreads)
        cu::cp_async_16(dst + padded(4 * v), src + 4 * v, true);
    }
    cu::cp_async_commit();
  };
  load(chunks, first);
  int it = 0;
  for (int64_t m = first; m < M; m += clusters, ++it) {
    float *A = chunks + (it & 1) * kChunkPad;
    // the next row's chunk into the other buffer, free since this block's last exchange read it
    load(chunks + ((it + 1) & 1) * kChunkPad, m + clusters);
    cu::cp_async_wait<1>();  // (this row's group done; the next one's may still run)
    __syncthreads();
    // modes 5, 4, 3, 2 (factors 5 .. 2) in this block's chunk
    contract<1>(A, F + 5 * kP * kP);
    __syncthreads();
    contract<8>(A, F + 4 * kP * kP);
    __syncthreads();
    contract<64>(A, F + 3 * kP * kP);
    __syncthreads();
    contract<512>(A, F + 2 * kP * kP);
    // every block done with its last row's B (stored) and with its chunk's steps
    cluster.sync();
    // to block s: for each of this block's 4 p1, its run s of (q2..q5), into s's B at
    // [p0 = rank / 2][p1 = 4 (rank % 2) + i]
    for (int v = t; v < kCluster * 4 * kRun / 4; v += kThreads) {  // (s, then i, then a float4)
      const int s = v / kRun, i = (v % kRun) / (kRun / 4), e4 = v % (kRun / 4);
      const int row = (rank / 2) * kP + 4 * (rank % 2) + i;
      const float4 val =
          *reinterpret_cast<const float4 *>(A + padded(i * 4096 + s * kRun + 4 * e4));
      float *remote = cluster.map_shared_rank(B, s);
      *reinterpret_cast<float4 *>(remote + padded(row * kRun + 4 * e4)) = val;
    }
    cluster.sync();  // B complete everywhere
    // modes 1 and 0 on [p0][p1][256]
    contract<kRun>(B, F + 1 * kP * kP);
    __syncthreads();
    contract<kP * kRun>(B, F);
    __syncthreads();
    // y[(q0·8 + q1)·4096 + rank·256 + e] = B[q0][q1][e] (+ beta · y; alpha is in factor 0)
    float *dst = const_cast<float *>(row_of(p.y, m, p.m2, p.y_rs1, p.y_rs2)) + rank * kRun;
    for (int v = t; v < kChunk / 4; v += kThreads) {
      const int run = v / (kRun / 4), e4 = v % (kRun / 4);
      float4 r = *reinterpret_cast<const float4 *>(B + padded(4 * v));
      float4 *out = reinterpret_cast<float4 *>(dst + int64_t(run) * 4096) + e4;
      if (p.beta != 0.f) {
        const float4 old = *out;
        r.x += p.beta * old.x, r.y += p.beta * old.y;
        r.z += p.beta * old.z, r.w += p.beta * old.w;
      }
      *out = r;
    }
  }
  cu::cp_async_wait<0>();
  cluster.sync();  // no block leaves while another may still write into its shared memory
#endif
}

// Rows that start on 16-byte boundaries (the float4 and cp.async accesses).
bool rows_aligned16(const void *ptr, int64_t rs1, int64_t rs2) {
  return aligned16(ptr) && rs1 % 4 == 0 && rs2 % 4 == 0;
}

// The launch configuration of the cluster kernel (grid still to be set).
cudaLaunchConfig_t cluster_config(cudaLaunchAttribute *attr, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = kCluster;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.gridDim = dim3(kCluster);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace

// How many clusters of the one-pass kernel run at once on this device for this problem, 0
// where it does not take it: KRONLINALG_KRON_CLUSTER=1, float32, six 8 x 8 factors, rows of x
// and y contiguous and 16-byte aligned, an sm_90 device with room for 16-block clusters.
int cluster_8x6_clusters(const kl_kron_problem *p, int dtype) {
  if (kl::knob_int("KRONLINALG_KRON_CLUSTER", 0) != 1 || dtype != KL_FLOAT32 || p->nfactors != kN) return 0;
  for (int k = 0; k < kN; ++k)
    if (p->P[k] != kP || p->Q[k] != kP) return 0;
  if (p->x_es != 1 || p->y_es != 1 || !rows_aligned16(p->x, p->x_rs1, p->x_rs2) ||
      !rows_aligned16(p->y, p->y_rs1, p->y_rs2))
    return 0;
  DeviceInfo dev;
  if (query_device(&dev) != cudaSuccess || dev.cc_major < 9 || dev.smem_optin < kSmemBytes)
    return 0;
  cudaError_t e = cudaFuncSetAttribute(
      kron_cluster_8x6, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kron_cluster_8x6, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(&attr, 0);
  int clusters = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveClusters(&clusters, kron_cluster_8x6, &cfg);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return 0;  // (the pass plan runs it)
  }
  return clusters;
}

bool launch_cluster_8x6(const kl_kron_problem *p, int dtype, cudaStream_t stream, int *rc) {
  const int clusters = cluster_8x6_clusters(p, dtype);
  if (clusters < 1) return false;
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = cluster_config(&attr, stream);
  const int64_t M = p->m1 * p->m2;
  cfg.gridDim = dim3(unsigned(std::min<int64_t>(clusters, M) * kCluster));
  ClusterP q;
  q.x = static_cast<const float *>(p->x);
  q.y = static_cast<float *>(p->y);
  q.m1 = p->m1, q.m2 = p->m2;
  q.x_rs1 = p->x_rs1, q.x_rs2 = p->x_rs2, q.y_rs1 = p->y_rs1, q.y_rs2 = p->y_rs2;
  for (int k = 0; k < kN; ++k) {
    q.F[k] = static_cast<const float *>(p->F[k]);
    q.F_rs[k] = p->F_rs[k], q.F_cs[k] = p->F_cs[k];
  }
  q.alpha = float(p->alpha), q.beta = float(p->beta);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kron_cluster_8x6, q);
  if (e != cudaSuccess) {
    const std::string msg = std::string("kron_matmul_cuda: cluster launch: ") +
                            cudaGetErrorString(e);
    *rc = kl::fail(KL_ERR_CUDA, msg.c_str());
  } else {
    *rc = KL_OK;
  }
  return true;
}

}  // namespace cu
}  // namespace kl
