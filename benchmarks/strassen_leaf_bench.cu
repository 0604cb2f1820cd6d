// The FP64 leaf's ceiling on this GPU, in one standalone run (CUDA events, warm, median of 10):
//  1. DMMA throughput per shape: m8n8k4 (sm_80) vs m16n8k8 and m16n8k16 .f64 (sm_90), 8
//     independent accumulators a warp, 8 and 16 warps an SM;
//  2. the leaf kernel's variants (k slice, ring depth, k8/k16 instruction) against cublasDgemm
//     on square N = 2048, 4096, 8192, with the max difference to cuBLAS's result;
//  3. the sum leaves (X = A0 ± A1, Y = B0 ± B1 formed while loading) against the plain leaf and
//     cuBLAS at the same sizes (LEAF_SUMS=1 only: measured in session 3, 0.40-0.45x);
//  4. with -DKL_HAVE_CUTLASS -I <cutlass include>: the CUTLASS-mainloop leaves
//     (strassen_leaf_cutlass.cuh, a few CTA/warp tiles, stages and DMMA shapes) with one target,
//     the production ones also with 2 and 4 signed targets (the multi-target epilogue), each
//     checked against the reference.
// The reference is a plain tiled FP64 GEMM on the CUDA cores; cuBLAS (for the times only) is
// loaded at run time from the path in $CUBLAS_LIB (the wheels' libcublas.so.*).
//   nvcc -arch=sm_90a -std=c++17 -O3 -I kernels/include -I kernels/common -I kernels/strassen \
//        [-DKL_HAVE_CUTLASS -I $CUTLASS_INC --expt-relaxed-constexpr] \
//        benchmarks/strassen_leaf_bench.cu -ldl -o /tmp/leaf_bench && CUBLAS_LIB=... /tmp/leaf_bench
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "strassen_leaf_f64.cuh"
#ifdef KL_HAVE_CUTLASS
#include "strassen_leaf_cutlass.cuh"
#endif

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

using namespace kl_strassen;

// ---------------------------------------------------------------------------------------------
// 1. instruction throughput

template <int SHAPE>  // 0: m8n8k4, 1: m16n8k8, 2: m16n8k16, 3: m16n8k4 (CUTLASS's sm_90 FP64)
__global__ void __launch_bounds__(512) mma_rate(double *out, int iters) {  // 16 warps an SM
  double acc[8][4], a[8], b[4];
  for (int u = 0; u < 8; ++u)
    for (int e = 0; e < 4; ++e) acc[u][e] = 0.0;
  for (int e = 0; e < 8; ++e) a[e] = 1e-3 * (threadIdx.x + e);
  for (int e = 0; e < 4; ++e) b[e] = 1e-3 * (threadIdx.x - e);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      if constexpr (SHAPE == 0) {
        asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                     : "+d"(acc[u][0]), "+d"(acc[u][1])
                     : "d"(a[0]), "d"(b[0]));
      } else if constexpr (SHAPE == 1) {
        double(&d)[4] = acc[u];
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
      } else if constexpr (SHAPE == 3) {
        double(&d)[4] = acc[u];
        asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, "
                     "{%6}, {%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(b[0]));
      } else {
        double(&d)[4] = acc[u];
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
                     : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                     : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]),
                       "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
      }
    }
  }
  double s = 0;
  for (int u = 0; u < 8; ++u)
    for (int e = 0; e < 4; ++e) s += acc[u][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

float time_ms(const std::function<void()> &fn, int reps = 10) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 2; ++i) fn();
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0));
    fn();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// ---------------------------------------------------------------------------------------------
// 2./3. leaves

struct Variant {
  const char *name;
  int sa, sb, wm;
  size_t smem;
  void (*kernel)(kl_strassen_sum_leaves, int);
};

template <int BK, int ST, bool K16, int SA, int SB, int WM = 2>
Variant make(const char *name) {
  auto k = leaf_f64_mma<BK, ST, K16, SA, SB, WM>;
  const size_t smem = f64_leaf_smem<BK, ST, SA, SB, WM>();
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  return {name, SA, SB, WM, smem, k};
}

#ifdef KL_HAVE_CUTLASS
struct CutVariant {
  const char *name;
  cudaError_t (*launch)(const kl_strassen_sum_leaves &, cudaStream_t);
};
template <int BM, int BN, int BK, int WMS, int WNS, int ST, int IK>
CutVariant cut(const char *name) {
  return {name, launch_leaf_f64_cutlass<CutlassLeafF64<BM, BN, BK, WMS, WNS, ST, IK>>};
}
#endif

__global__ void fill(double *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = double(h & 0xffffff) / double(0x800000) - 1.0;
  }
}

// dst (rows x cols, ld cols) = s0 + sign * s1 (both ld lds)
__global__ void add2(double *dst, const double *s0, const double *s1, double sign, int64_t rows,
                     int64_t cols, int64_t lds) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    dst[i] = s0[r * lds + c] + sign * s1[r * lds + c];
  }
}

// reference: C = X Y, 16 x 16 tiles through shared memory (ld: x ldx, y ldy, c n)
__global__ void ref_gemm(const double *x, int64_t ldx, const double *y, int64_t ldy, double *c,
                         int n) {
  __shared__ double xs[16][17], ys[16][17];
  const int r = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  double acc = 0;
  for (int k0 = 0; k0 < n; k0 += 16) {
    xs[threadIdx.y][threadIdx.x] = x[int64_t(r) * ldx + k0 + threadIdx.x];
    ys[threadIdx.y][threadIdx.x] = y[int64_t(k0 + threadIdx.y) * ldy + col];
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) acc = fma(xs[threadIdx.y][kk], ys[kk][threadIdx.x], acc);
    __syncthreads();
  }
  c[int64_t(r) * n + col] = acc;
}

// cuBLAS through dlopen (row-major C = X Y as column-major C^T = Y^T X^T)
struct Cublas {
  using create_t = int (*)(void **);
  using dgemm_t = int (*)(void *, int, int, int, int, int, const double *, const double *, int,
                          const double *, int, const double *, double *, int);
  void *h = nullptr;
  dgemm_t dgemm = nullptr;
  bool load() {
    const char *path = std::getenv("CUBLAS_LIB");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : nullptr;
    if (!lib) {
      std::printf("cuBLAS not loaded (%s): times without it\n", path ? dlerror() : "no CUBLAS_LIB");
      return false;
    }
    auto create = reinterpret_cast<create_t>(dlsym(lib, "cublasCreate_v2"));
    dgemm = reinterpret_cast<dgemm_t>(dlsym(lib, "cublasDgemm_v2"));
    return create && dgemm && create(&h) == 0;
  }
  void gemm(int n, const double *x, int64_t ldx, const double *y, int64_t ldy, double *c) {
    const double one = 1.0, zero = 0.0;
    dgemm(h, 0, 0, n, n, n, &one, y, int(ldy), x, int(ldx), &zero, c, n);  // 0: CUBLAS_OP_N
  }
};

double max_diff(const double *d0, const double *d1, size_t n, double *scale) {
  std::vector<double> h0(n), h1(n);
  CK(cudaMemcpy(h0.data(), d0, n * 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h1.data(), d1, n * 8, cudaMemcpyDeviceToHost));
  double m = 0, s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(h0[i] - h1[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
    s = std::max(s, std::fabs(h1[i]));
  }
  *scale = s;
  return m;
}

int main(int argc, char **argv) {
  // "profile": one size, no instruction rates, no sums (for ncu on the plain leaf)
  const bool profile = argc > 1 && std::string(argv[1]) == "profile";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);

  // 1.
  double *out;
  CK(cudaMalloc(&out, size_t(sms) * 16 * 512 * 8));
  const int iters = 2048;
  const double flops_per[4] = {512.0, 2048.0, 4096.0, 1024.0};
  const char *names[4] = {"m8n8k4", "m16n8k8", "m16n8k16", "m16n8k4"};
  for (int warps : {8, 16}) {
    if (profile) break;
    for (int s = 0; s < 4; ++s) {
      auto go = [&] {
        const dim3 grid(sms), block(32 * warps);
        if (s == 0) mma_rate<0><<<grid, block>>>(out, iters);
        if (s == 1) mma_rate<1><<<grid, block>>>(out, iters);
        if (s == 2) mma_rate<2><<<grid, block>>>(out, iters);
        if (s == 3) mma_rate<3><<<grid, block>>>(out, iters);
      };
      const float ms = time_ms(go, 5);
      const double fl = double(sms) * warps * iters * 8 * flops_per[s];
      std::printf("mma %-9s %2d warps/SM: %.1f TFLOP/s\n", names[s], warps, fl / ms / 1e9);
    }
  }

  // 2./3.
  std::vector<Variant> plain = {
      make<32, 3, false, 1, 1>("bk32 st3 k8"),  // the default of session 3 (0.49-0.65x)
      make<32, 3, true, 1, 1>("bk32 st3 k16"),
  };
  const bool with_sums = std::getenv("LEAF_SUMS") != nullptr;
#ifdef KL_HAVE_CUTLASS
  // CUTLASS's sm_90 FP64 list has 128x128x16 / 4x2 warps / 3 stages / m16n8k4 first; [i]: the
  // production leaf KRONLINALG_STRASSEN_LEAF = i (kernels/strassen/strassen_leaf_cutlass.cu)
  std::vector<CutVariant> cuts = {
      cut<128, 128, 16, 32, 64, 3, 4>("cut 128x128x16 w32x64 st3 k4 [1]"),
      cut<128, 128, 16, 32, 64, 4, 4>("cut 128x128x16 w32x64 st4 k4"),
      cut<128, 128, 16, 32, 64, 3, 8>("cut 128x128x16 w32x64 st3 k8 [2]"),
      cut<128, 128, 32, 32, 64, 3, 8>("cut 128x128x32 w32x64 st3 k8"),
      cut<128, 128, 32, 32, 64, 3, 4>("cut 128x128x32 w32x64 st3 k4"),
      cut<128, 128, 16, 64, 32, 3, 4>("cut 128x128x16 w64x32 st3 k4"),
      cut<256, 64, 16, 64, 32, 3, 4>("cut 256x64x16 w64x32 st3 k4"),
      cut<128, 64, 16, 64, 32, 3, 4>("cut 128x64x16 w64x32 st3 k4 [3]"),
      cut<64, 128, 16, 32, 64, 4, 4>("cut 64x128x16 w32x64 st4 k4"),
      cut<64, 256, 16, 32, 64, 3, 4>("cut 64x256x16 w32x64 st3 k4"),
  };
#endif
  std::vector<Variant> sums = {
      make<16, 2, false, 2, 2>("sum22 bk16 st2"), make<8, 5, false, 2, 2>("sum22 bk8 st5"),
      make<16, 3, false, 2, 1>("sum21 bk16 st3"), make<16, 3, false, 1, 2>("sum12 bk16 st3"),
      make<16, 2, true, 2, 2>("sum22 bk16 st2 k16"),
  };
  Cublas blas;
  const bool have_blas = blas.load();
  for (int n : {2048, 4096, 8192}) {
    if (profile && n != 4096) continue;
    const size_t nn = size_t(n) * n;
    // A: n x 2n (two n x n halves side by side, ld 2n), B: 2n x n (halves stacked, ld n)
    double *A, *B, *C, *R, *XS, *YS;
    CK(cudaMalloc(&A, 2 * nn * 8));
    CK(cudaMalloc(&B, 2 * nn * 8));
    CK(cudaMalloc(&C, nn * 8));
    CK(cudaMalloc(&R, nn * 8));
    CK(cudaMalloc(&XS, nn * 8));
    CK(cudaMalloc(&YS, nn * 8));
    fill<<<1024, 256>>>(A, 2 * nn, 1);
    fill<<<1024, 256>>>(B, 2 * nn, 2);
    // plain: X = A[:, :n] (ld 2n), Y = B[:n] (ld n)
    auto reference = [&](const double *x, int64_t ldx, const double *y, int64_t ldy) {
      ref_gemm<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(x, ldx, y, ldy, R, n);
      CK(cudaDeviceSynchronize());
    };
    const double fl = 2.0 * n * double(n) * n;
    const float tc = have_blas ? time_ms([&] { blas.gemm(n, A, 2 * n, B, n, C); }) : NAN;
    std::printf("\nN=%d cuBLAS %.3f ms (%.1f TFLOP/s)\n", n, tc, fl / tc / 1e9);
    reference(A, 2 * n, B, n);
    auto leaves_for = [&](int nx, int ny, double xsgn, double ysgn) {
      kl_strassen_sum_leaves p{};
      p.count = 1;
      p.m = p.n = p.k = n;
      p.ldx = 2 * n;
      p.ldy = n;
      p.ldc = n;
      p.alpha = 1.0;
      p.beta = 0.0;
      auto &l = p.leaf[0];
      l.x[0] = A;
      l.x[1] = A + n;
      l.y[0] = B;
      l.y[1] = B + nn;
      l.nx = nx;
      l.ny = ny;
      l.xneg = xsgn < 0 ? 2u : 0u;
      l.yneg = ysgn < 0 ? 2u : 0u;
      l.ntargets = 1;
      l.negative = 0;
      l.fresh = 1;
      l.c[0] = C;
      return p;
    };
    const dim3 grid(n / 128, n / 128, 1);
    for (auto &v : plain) {
      const auto p = leaves_for(1, 1, 1, 1);
      const dim3 g(n / 128, n / (64 * v.wm), 1);
      const float t = time_ms([&] { v.kernel<<<g, 128 * v.wm, v.smem>>>(p, 1); });
      double sc;
      const double d = max_diff(C, R, nn, &sc);
      std::printf("leaf %-18s %.3f ms  %.1f TFLOP/s  %.3fx cuBLAS  max|diff| %.1e (of %.1e)\n",
                  v.name, t, fl / t / 1e9, tc / t, d, sc);
    }
    // sums: X = A0 - A1, Y = B0 + B1 (reference: cuBLAS on the formed sums)
    add2<<<1024, 256>>>(XS, A, A + n, -1.0, n, n, 2 * n);
    add2<<<1024, 256>>>(YS, B, B + nn, 1.0, n, n, n);
    for (auto &v : sums) {
      if (profile || !with_sums) break;
      const auto p = leaves_for(v.sa, v.sb, -1.0, 1.0);
      const double *xr = v.sa == 2 ? XS : A;
      const double *yr = v.sb == 2 ? YS : B;
      reference(xr, v.sa == 2 ? n : 2 * n, yr, n);
      const float t = time_ms([&] { v.kernel<<<grid, kF64Threads, v.smem>>>(p, 1); });
      double sc;
      const double d = max_diff(C, R, nn, &sc);
      std::printf("leaf %-18s %.3f ms  %.1f TFLOP/s  %.3fx cuBLAS  max|diff| %.1e (of %.1e)\n",
                  v.name, t, fl / t / 1e9, tc / t, d, sc);
    }
#ifdef KL_HAVE_CUTLASS
    // the multi-target epilogue: target t gets (-1)^t X Y (first writes, beta 0); T = 1, 2, 4
    // (targets C, XS, YS, R2); t = 0 and t = 1 are checked against the reference
    reference(A, 2 * n, B, n);
    double *R2;
    CK(cudaMalloc(&R2, nn * 8));
    double *tgt[4] = {C, XS, YS, R2};
    for (auto &v : cuts) {
      if (profile) break;
      const bool production = std::strchr(v.name, '[') != nullptr;
      for (int T : {1, 2, 4}) {
        if (T > 1 && !production) break;  // the multi-target cost: on the production leaves
        auto p = leaves_for(1, 1, 1, 1);
        p.leaf[0].ntargets = T;
        p.leaf[0].negative = 0xAu;
        p.leaf[0].fresh = 0xFu;
        for (int t = 0; t < T; ++t) p.leaf[0].c[t] = tgt[t];
        CK(cudaMemset(C, 0xff, nn * 8));  // NaN: a target not written shows
        const float t = time_ms([&] { CK(v.launch(p, 0)); });
        double sc, d = max_diff(C, R, nn, &sc);
        if (T > 1) {
          add2<<<1024, 256>>>(XS, XS, R, 1.0, n, n, n);  // target 1 = -X Y: XS + R = 0
          CK(cudaDeviceSynchronize());
          std::vector<double> h(nn);
          CK(cudaMemcpy(h.data(), XS, nn * 8, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < nn; ++i) d = std::max(d, std::isnan(h[i]) ? INFINITY : std::fabs(h[i]));
        }
        if (std::isnan(d)) d = INFINITY;
        std::printf("leaf %-34s T=%d %.3f ms  %.1f TFLOP/s  %.3fx cuBLAS  max|diff| %.1e (of %.1e)\n",
                    v.name, T, t, fl / t / 1e9, tc / t, d, sc);
      }
    }
    CK(cudaFree(R2));
#endif
    CK(cudaFree(A));
    CK(cudaFree(B));
    CK(cudaFree(C));
    CK(cudaFree(R));
    CK(cudaFree(XS));
    CK(cudaFree(YS));
  }
  return 0;
}
