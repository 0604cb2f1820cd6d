// Runs the CUDA kernels of ks_cuda_kernels.cuh on the CPU, one std::thread per CUDA thread, to
// check their indexing (tile decomposition, loaders, shared-memory layouts, mma fragments,
// epilogues) on machines without a GPU.  Not part of the build; tests/test_structured.py
// compiles and runs it when g++ and the CUDA headers are present (marked slow):
//
//   g++ -std=c++20 -O1 -pthread -DKL_KS_EMULATE -I/usr/local/cuda/include -I. -I../include \
//       -I../common ks_cuda_emulate.cpp ../common/status.cpp -o /tmp/ks_emulate && /tmp/ks_emulate
//
// mma.sync is emulated from the PTX ISA's m16n8k16 fragment layouts: lane (g, q) = (lane/4,
// lane%4) holds A[g][2q..2q+1], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]; B[2q..2q+1][g],
// B[2q+8..][g]; C[g][2q], C[g][2q+1], C[g+8][2q], C[g+8][2q+1] (lower index in the low half).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};
thread_local Dim threadIdx, blockIdx;
static std::barrier<> *block_barrier;
static std::barrier<> *warp_barrier[8];
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
template <class T>
inline T __ldg(const T *p) {
  return *p;
}
alignas(16) static unsigned char dyn_smem[256 * 1024];
namespace kl {
namespace ks {
inline unsigned char *dynamic_smem() { return dyn_smem; }
}  // namespace ks
}  // namespace kl

#include "ks_cuda_kernels.cuh"

namespace kl {
namespace ks {
static uint32_t wa[8][32][4], wb[8][32][2];

template <class T>
static float lo(uint32_t r) {
  T h;
  uint16_t bits = uint16_t(r & 0xffff);
  std::memcpy(&h, &bits, 2);
  return Elem<T>::to_f(h);
}
template <class T>
static float hi(uint32_t r) {
  T h;
  uint16_t bits = uint16_t(r >> 16);
  std::memcpy(&h, &bits, 2);
  return Elem<T>::to_f(h);
}

template <class T>
static void mma_emulated(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  std::memcpy(wa[w][lane], a, sizeof(a));
  std::memcpy(wb[w][lane], b, sizeof(b));
  warp_barrier[w]->arrive_and_wait();
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int G = L / 4, Q = L % 4;
    const uint32_t *ra = wa[w][L], *rb = wb[w][L];
    A[G][2 * Q] = lo<T>(ra[0]), A[G][2 * Q + 1] = hi<T>(ra[0]);
    A[G + 8][2 * Q] = lo<T>(ra[1]), A[G + 8][2 * Q + 1] = hi<T>(ra[1]);
    A[G][2 * Q + 8] = lo<T>(ra[2]), A[G][2 * Q + 9] = hi<T>(ra[2]);
    A[G + 8][2 * Q + 8] = lo<T>(ra[3]), A[G + 8][2 * Q + 9] = hi<T>(ra[3]);
    B[2 * Q][G] = lo<T>(rb[0]), B[2 * Q + 1][G] = hi<T>(rb[0]);
    B[2 * Q + 8][G] = lo<T>(rb[1]), B[2 * Q + 9][G] = hi<T>(rb[1]);
  }
  warp_barrier[w]->arrive_and_wait();  // everyone has read the fragments before they change
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
  for (int e = 0; e < 4; ++e) {
    float s = 0.f;
    for (int k = 0; k < 16; ++k) s += A[rows[e]][k] * B[k][cols[e]];
    c[e] += s;
  }
}
template <>
void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_emulated<__half>(c, a, b);
}
template <>
void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_emulated<__nv_bfloat16>(c, a, b);
}
}  // namespace ks
}  // namespace kl

using namespace kl::ks;

template <class Kernel>
static void launch(Kernel kernel, const Params &p, int nthreads) {
  const int64_t blocks = p.a * p.nJ * p.nN * p.nK;
  std::barrier<> bar(nthreads);
  block_barrier = &bar;
  std::vector<std::barrier<> *> wbs;
  for (int w = 0; w < 8; ++w) warp_barrier[w] = new std::barrier<>(32);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t)
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (int64_t b = 0; b < blocks; ++b) {
        blockIdx.x = unsigned(b);
        kernel(p);
        bar.arrive_and_wait();  // the next block may reuse shared memory
      }
    });
  for (auto &th : threads) th.join();
  for (int w = 0; w < 8; ++w) delete warp_barrier[w];
}

template <class T>
static float tof(T v) {
  return Elem<T>::to_f(v);
}

static std::mt19937_64 rng(12345);

// one problem: random values, NaN-poisoned output, compare with a float64 reference
template <class T, class Kernel>
static bool check(Kernel kernel, int TN, int TK, int TJ, int64_t a, int64_t b, int64_t c,
                  int64_t d, int64_t B, bool bf, int pad_ld, const char *name,
                  int nthreads = kThreads) {
  std::normal_distribution<float> nd;
  const int64_t N = a * c * d, M = a * b * d;
  const int64_t x_ld = (bf ? N : B) + pad_ld, y_ld = (bf ? M : B) + pad_ld;
  std::vector<T> K(size_t(a * b * c * d)), X(size_t((bf ? B : N) * x_ld));
  std::vector<T> Y(size_t((bf ? B : M) * y_ld), Elem<T>::from_f(NAN));
  for (auto &v : K) v = Elem<T>::from_f(nd(rng));
  for (auto &v : X) v = Elem<T>::from_f(nd(rng));
  Params p;
  p.a = a, p.b = b, p.c = c, p.d = d, p.B = B;
  p.K = K.data(), p.X = X.data(), p.x_ld = x_ld, p.Y = Y.data(), p.y_ld = y_ld;
  p.nN = (B + TN - 1) / TN, p.nK = (b + TK - 1) / TK, p.nJ = (d + TJ - 1) / TJ;
  launch(kernel, p, nthreads);
  double err = 0, ref_norm = 0;
  bool finite = true;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t k = 0; k < b; ++k)
        for (int64_t j = 0; j < d; ++j) {
          double ref = 0;
          for (int64_t l = 0; l < c; ++l) {
            const int64_t col = (i * c + l) * d + j;
            const double xv = tof(bf ? X[size_t(n * x_ld + col)] : X[size_t(col * x_ld + n)]);
            ref += double(tof(K[size_t(((i * b + k) * c + l) * d + j)])) * xv;
          }
          const int64_t row = (i * b + k) * d + j;
          const double got = tof(bf ? Y[size_t(n * y_ld + row)] : Y[size_t(row * y_ld + n)]);
          finite = finite && std::isfinite(got);
          err += (got - ref) * (got - ref);
          ref_norm += ref * ref;
        }
  // the padding between rows must stay untouched (NaN)
  bool pad_ok = true;
  for (int64_t r = 0; r < (bf ? B : M) && pad_ld; ++r)
    for (int64_t e = (bf ? M : B); e < y_ld; ++e) pad_ok = pad_ok && std::isnan(tof(Y[size_t(r * y_ld + e)]));
  const double rel = std::sqrt(err / ref_norm);
  const double tol = sizeof(T) == 4 ? 1e-5 : (std::is_same<T, __half>::value ? 2e-3 : 1.6e-2);
  const bool ok = finite && pad_ok && rel < tol;
  std::printf("%-4s %-36s a=%lld b=%lld c=%lld d=%lld B=%lld %s pad=%d  rel=%.2e %s%s%s\n",
              ok ? "ok" : "FAIL", name, (long long)a, (long long)b, (long long)c, (long long)d,
              (long long)B, bf ? "bf" : "bl", pad_ld, rel, finite ? "" : " NON-FINITE",
              pad_ok ? "" : " PADDING-WRITTEN", "");
  return ok;
}

// F32: the float32 kernel with TL l values per stage and NT threads (TL, NT unused otherwise)
template <class T, int TN, int TK, int TJ, bool F32, int TL = 8, int NT = kThreads>
static int suite(const char *name) {
  int bad = 0;
  // patterns around the tile: partial and several tiles on every axis, odd sizes, c over
  // several l chunks, aligned and misaligned leading dimensions
  const int64_t cases[][5] = {
      {1, TK, 20, TJ, TN},        {2, TK + 3, 7, TJ, TN + 5},    {1, 5, 33, TJ + 1, 37},
      {3, 2 * TK, 16, 2 * TJ, 2 * TN}, {1, 3, 1, 3 * TJ, 13}, {2, TK - 1, 9, TJ > 1 ? TJ - 1 : 1, 19},
      {2, TK / 2 + 1, 24, TJ, TN + 9},
  };
  for (const auto &cs : cases)
    for (int bf = 0; bf < 2; ++bf)
      for (int pad : {0, 3}) {
        bool ok;
        if constexpr (F32)
          ok = bf ? check<float>(ks_f32<TN, TK, TJ, TL, NT, true>, TN, TK, TJ, cs[0], cs[1], cs[2], cs[3], cs[4], true, pad, name, NT)
                  : check<float>(ks_f32<TN, TK, TJ, TL, NT, false>, TN, TK, TJ, cs[0], cs[1], cs[2], cs[3], cs[4], false, pad, name, NT);
        else
          ok = bf ? check<T>(ks_mma<T, TN, TK, TJ, true>, TN, TK, TJ, cs[0], cs[1], cs[2], cs[3], cs[4], true, pad, name)
                  : check<T>(ks_mma<T, TN, TK, TJ, false>, TN, TK, TJ, cs[0], cs[1], cs[2], cs[3], cs[4], false, pad, name);
        bad += !ok;
      }
  return bad;
}

int main(int argc, char **argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int bad = 0;
  bad += suite<float, 128, 128, 1, true>("f32 TN128 TK128 TJ1");
  bad += suite<float, 64, 16, 16, true>("f32 TN64 TK16 TJ16");
  bad += suite<float, 64, 64, 6, true, 8, 384>("f32 TN64 TK64 TJ6 NT384");
  bad += suite<__half, 128, 64, 1, false>("f16 TN128 TK64 TJ1");
  bad += suite<__nv_bfloat16, 32, 16, 16, false>("bf16 TN32 TK16 TJ16");
  if (!quick) {
    bad += suite<float, 512, 32, 1, true>("f32 TN512 TK32 TJ1");
    bad += suite<float, 128, 64, 2, true>("f32 TN128 TK64 TJ2");
    bad += suite<float, 256, 16, 4, true>("f32 TN256 TK16 TJ4");
    bad += suite<float, 64, 64, 4, true>("f32 TN64 TK64 TJ4");
    bad += suite<float, 64, 32, 8, true, 4>("f32 TN64 TK32 TJ8 TL4");
    bad += suite<float, 64, 64, 3, true, 8, 192>("f32 TN64 TK64 TJ3 NT192");
    bad += suite<__half, 128, 32, 2, false>("f16 TN128 TK32 TJ2");
    bad += suite<__half, 128, 16, 4, false>("f16 TN128 TK16 TJ4");
    bad += suite<__half, 64, 16, 8, false>("f16 TN64 TK16 TJ8");
    bad += suite<__half, 32, 16, 16, false>("f16 TN32 TK16 TJ16");
    bad += suite<__nv_bfloat16, 128, 64, 1, false>("bf16 TN128 TK64 TJ1");
  }
  std::printf("%d failures\n", bad);
  return bad != 0;
}
