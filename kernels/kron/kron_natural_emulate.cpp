// Runs the natural-order tensor-core kernels of kron_cuda_natural_mma.cuh (float64 DMMA,
// float16, bfloat16) on the CPU, one std::thread per CUDA thread (kron_cuda_ptx_emu.h), to check
// their indexing (tile loads, the column views' swizzles, the mma fragments and the packing of
// half pairs, in-place steps, the epilogue with alpha and beta, partial line tiles, several
// passes) against a float64 reference, on machines without a GPU.  Not part of the build;
// tests/test_kron_cuda.py compiles and runs it when g++ and the CUDA headers are present:
//
//   g++ -std=c++20 -O1 -pthread -DKL_EMU -I/usr/local/cuda/include -I. -I../include \
//       -I../common kron_natural_emulate.cpp -o /tmp/kron_natural_emulate && \
//       /tmp/kron_natural_emulate
//
// The passes are planned here the way configure_natural (kron_cuda.cu) sizes them: tiles of T
// lines (the last factors) or T consecutive i, blocks of 4 warps (8 for P = 16 and float64
// P = 8), float64 P = 8 column tiles of 16 i, half P = 32 line tiles of 8 lines (groups of 2
// or more), grids of at most 3 persistent blocks, so that blocks take several tiles; and the
// half types' ring kernel (kron_cuda_natural_mma_ring.cuh; `kron_natural_emulate ring` runs
// only those).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kron_cuda_ptx_emu.h"
#include "kron_cuda_natural_mma.cuh"
#include "kron_cuda_natural_mma_ring.cuh"

using namespace kl::cu;

template <class T>
static double to_d(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return double(v);
}
template <class T>
static T from_d(double v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(float(v));
  else
    return T(v);
}

static int failures = 0;

template <int P>
constexpr int wn_of() {
  return P == 8 ? 1 : P == 16 ? 2 : 4;
}

// One pass of `count` factors ending at `last` (of n, all P x P) from src to dst; false where
// the planner's rules give no tile.
template <class T, int P>
static bool run_pass(int64_t M, int n, int last, int count, const std::vector<const T *> &F,
                     const T *src, T *dst, double alpha, double beta, int stages) {
  constexpr int WN = wn_of<P>(), NS = P / 8 / WN;
  int64_t bin = 1, O = 1, I = 1;
  for (int s = 0; s < count; ++s) bin *= P;
  for (int i = 0; i < last - count + 1; ++i) O *= P;
  for (int i = last + 1; i < n; ++i) I *= P;
  const bool line = I == 1;
  const int warps = P == 16 || (sizeof(T) == 8 && P == 8) ? 8 : 4;
  // (the half types: column tiles of 16 i or more, 32-byte runs)
  const int ti_min = sizeof(T) == 2 ? 16 : 8;
  const int64_t T0 = std::max<int64_t>(line ? 1 : ti_min, 32 * warps * P / bin / NS);
  int64_t TT = T0;
  if (line && P == 8) TT = 4 * T0;
  if (line && P == 16) TT = std::max<int64_t>(T0, sizeof(T) == 2 ? 4 : 2);
  if (!line && (P == 16 || sizeof(T) == 2)) TT = std::max<int64_t>(T0, 32);
  if (!line && sizeof(T) == 8 && P == 8) TT = 16;
  if (line && sizeof(T) == 2 && P == 32 && count > 1) TT = 8;
  const bool buf2_ = NS > 1 && count > 1;
  auto smem_of = [&](int64_t tt) {
    return size_t(count * P * P + tt * bin * (stages + (buf2_ ? 1 : 0))) * sizeof(T);
  };
  if (!line) {
    while (TT > ti_min && smem_of(TT) > 200 * 1024) TT /= 2;
    while (TT > ti_min && I % TT) TT /= 2;
    if (TT < ti_min || I % TT || (bin / P * TT) % 32 || TT / 4 > 32 * warps) return false;
  } else if ((TT * bin / P) % 32) {
    return false;
  }
  const bool buf2 = NS > 1 && count > 1;
  NatP p{};
  p.nsteps = count;
  p.line_tile = line;
  p.T = int(TT);
  p.Bin = p.Bout = int(bin);
  p.rows = M * O;
  p.I = I;
  p.ntiles = line ? (p.rows + TT - 1) / TT : p.rows * (I / TT);
  p.buf1_elems = int(TT * bin);
  p.buf2_elems = buf2 ? int(TT * bin) : 0;
  p.fs_elems = count * P * P;
  p.stages = stages;
  p.x = reinterpret_cast<const float *>(src);
  p.y = reinterpret_cast<float *>(dst);
  p.alpha_d = alpha;
  p.beta_d = beta;
  p.alpha = float(alpha);
  p.beta = float(beta);
  for (int s = 0; s < count; ++s) {
    p.F[s] = reinterpret_cast<const float *>(F[last - s]);
    p.frs[s] = P;  // row-major factors
    p.fcs[s] = 1;
  }
  const size_t smem = size_t(p.fs_elems + TT * bin * (stages + (buf2 ? 1 : 0))) * sizeof(T);
  const unsigned grid = unsigned(std::min<int64_t>(p.ntiles, 3));
  emu_launch(grid, 32 * warps, smem, [&] { kron_mma_natural_kernel<T, P, WN>(p); });
  return true;
}

// One pass of the half types' ring kernel (kron_cuda_natural_mma_ring.cuh): line tiles of one
// line (I == 1) or column tiles of `ti` i, slots as configure_natural_ring sizes them.
template <class T, int P>
static bool run_ring_pass(int64_t M, int n, int last, int count, const std::vector<const T *> &F,
                          const T *src, T *dst, double alpha, double beta, int ti) {
  int64_t bin = 1, O = 1, I = 1;
  for (int s = 0; s < count; ++s) bin *= P;
  for (int i = 0; i < last - count + 1; ++i) O *= P;
  for (int i = last + 1; i < n; ++i) I *= P;
  const bool line = I == 1;
  const int64_t TT = line ? 1 : ti;
  if (!line && I % TT) return false;
  const int64_t fs = int64_t(count) * P * P, slice = TT * bin / P;
  if (slice % (32 * P) || TT / 8 > 32) return false;
  const int64_t slots =
      std::min<int64_t>(2 * P, (int64_t(227) * 1024 - fs * int64_t(sizeof(T))) /
                                   (slice * int64_t(sizeof(T)) + 8));
  if (slots < P) return false;
  NatP p{};
  p.nsteps = count;
  p.line_tile = line;
  p.T = int(TT);
  p.Bin = p.Bout = int(bin);
  p.rows = M * O;
  p.I = I;
  p.ntiles = line ? p.rows : p.rows * (I / TT);
  p.buf1_elems = int(TT * bin);
  p.fs_elems = int(fs);
  p.stages = int(slots);
  p.x = reinterpret_cast<const float *>(src);
  p.y = reinterpret_cast<float *>(dst);
  p.alpha_d = alpha;
  p.beta_d = beta;
  p.alpha = float(alpha);
  p.beta = float(beta);
  for (int s = 0; s < count; ++s) {
    p.F[s] = reinterpret_cast<const float *>(F[last - s]);
    p.frs[s] = P;
    p.fcs[s] = 1;
  }
  const size_t smem = size_t(fs + slots * slice) * sizeof(T) + size_t(slots) * 8;
  const unsigned grid = unsigned(std::min<int64_t>(p.ntiles, 2));
  emu_launch(grid, natm_ring_threads(P), smem, [&] { kron_mma_natural_ring_kernel<T, P>(p); });
  return true;
}

// x (M x P^n) @ kron(F_0 .. F_{n-1}) in passes of the given factor counts (the last factors
// first), against float64 on the same (rounded) inputs.
template <class T, int P>
static void check(const char *name, int64_t M, int n, std::vector<int> counts, double alpha,
                  double beta, double tol, int stages = 2, std::vector<int> ring = {}) {
  std::mt19937 rng(unsigned(M * 31 + n * 7 + P));
  std::normal_distribution<double> nd;
  int64_t K = 1;
  for (int i = 0; i < n; ++i) K *= P;
  std::vector<std::vector<T>> F(n, std::vector<T>(P * P));
  std::vector<const T *> Fp;
  for (auto &f : F) {
    for (auto &v : f) v = from_d<T>(nd(rng) / std::sqrt(double(P)));
    Fp.push_back(f.data());
  }
  std::vector<T> x(M * K), y(M * K + 8), bufs[2] = {std::vector<T>(M * K), std::vector<T>(M * K)};
  for (auto &v : x) v = from_d<T>(nd(rng));
  for (auto &v : y) v = from_d<T>(nd(rng));
  const T sentinel = from_d<T>(4321.0);
  for (int i = 0; i < 8; ++i) y[M * K + i] = sentinel;
  std::vector<double> ref(M * K), y0(M * K);
  for (int64_t i = 0; i < M * K; ++i) y0[i] = to_d(y[i]);
  // reference: contract each mode i with F_i
  std::vector<double> cur(M * K), nxt(M * K);
  for (int64_t i = 0; i < M * K; ++i) cur[i] = to_d(x[i]);
  int64_t inner = K;
  for (int i = 0; i < n; ++i) {
    inner /= P;  // elements after mode i
    const int64_t outer = M * K / (inner * P);
    for (int64_t o = 0; o < outer; ++o)
      for (int q = 0; q < P; ++q)
        for (int64_t r = 0; r < inner; ++r) {
          double s = 0;
          for (int k = 0; k < P; ++k) s += cur[(o * P + k) * inner + r] * to_d(F[i][k * P + q]);
          nxt[(o * P + q) * inner + r] = s;
        }
    cur.swap(nxt);
  }
  for (int64_t i = 0; i < M * K; ++i) ref[i] = alpha * cur[i] + beta * y0[i];
  // the passes
  int last = n - 1;
  const T *src = x.data();
  bool ran = true;
  for (size_t k = 0; k < counts.size(); ++k) {
    const bool fin = k + 1 == counts.size();
    T *dst = fin ? y.data() : bufs[k % 2].data();
    // (ring[k] > 0: this pass on the ring kernel, column tiles of ring[k] i)
    const int rk = k < ring.size() ? ring[k] : 0;
    const bool ok = rk ? run_ring_pass<T, P>(M, n, last, counts[k], Fp, src, dst,
                                             fin ? alpha : 1.0, fin ? beta : 0.0, rk)
                       : run_pass<T, P>(M, n, last, counts[k], Fp, src, dst, fin ? alpha : 1.0,
                                        fin ? beta : 0.0, stages);
    if (!ok) {
      ran = false;
      break;
    }
    src = dst;
    last -= counts[k];
  }
  double err = 0, scale = 0;
  for (int64_t i = 0; i < M * K && ran; ++i) {
    const double d = to_d(y[i]) - ref[i];
    err += d * d;
    scale += ref[i] * ref[i];
  }
  bool untouched = true;
  for (int i = 0; i < 8; ++i) untouched &= to_d(y[M * K + i]) == to_d(sentinel);
  const double rel = std::sqrt(err / std::max(scale, 1e-300));
  const bool ok = ran && rel <= tol && untouched && std::isfinite(rel);
  failures += !ok;
  std::string cs;
  for (int c : counts) cs += std::to_string(c) + " ";
  for (size_t k = 0; k < ring.size(); ++k)
    if (ring[k]) cs += "(ring " + std::to_string(counts[k]) + ") ";
  std::printf("%-5s %-5s %ld x %d^%d passes [ %s] alpha %g beta %g stages %d  rel err %.2e%s%s\n",
              ok ? "ok" : "FAIL", name, long(M), P, n, cs.c_str(), alpha, beta, stages, rel,
              untouched ? "" : "  WROTE PAST THE END", ran ? "" : "  NO TILE");
  std::fflush(stdout);
}

template <class T>
static void suite(const char *name, double tol) {
  check<T, 8>(name, 5, 5, {3, 2}, 1.0, 0.0, tol);     // column tiles of 32 i (half)
  check<T, 16>(name, 1, 4, {2, 2}, 0.5, 1.0, tol);    // column tiles of 32 i, 2 steps
  check<T, 32>(name, 1, 3, {1, 2}, 1.0, 0.0, tol, 3); // column tiles of 32 (half) / 8 i
  check<T, 8>(name, 3, 4, {2, 2}, 0.5, 2.0, tol, 3);
  check<T, 16>(name, 3, 3, {2, 1}, 1.0, 0.0, tol);
  check<T, 16>(name, 2, 3, {1, 2}, -1.5, 0.5, tol);
  check<T, 16>(name, 1, 4, {3, 1}, 1.0, 0.0, tol);
  check<T, 32>(name, 3, 2, {2}, 0.5, 2.0, tol);
  check<T, 32>(name, 1, 3, {1, 2}, 1.0, 0.0, tol);
  check<T, 64>(name, 3, 2, {2}, 1.0, 1.0, tol);
  check<T, 64>(name, 2, 2, {1, 1}, 1.0, 0.0, tol);
  check<T, 8>(name, 1, 6, {3, 3}, 0.5, 2.0, tol);     // f64: 3-step column tiles of 16 i
  check<T, 32>(name, 9, 2, {2}, 1.0, 0.0, tol);       // half: line tiles of 8, one partial
}

// The half types' ring kernel: 3- and 4-step line tiles, 3-step P = 16 column tiles of 16 i,
// 2-step P = 32 column tiles of 64 and 32 i and P = 16 ones of 64 i, blocks of several tiles
// (the ring wraps).
template <class T>
static void ring_suite(const char *name, double tol) {
  check<T, 32>(name, 5, 3, {3}, -1.5, 0.5, tol, 2, {1});
  check<T, 16>(name, 5, 4, {1, 3}, 0.75, 0.0, tol, 2, {0, 16});
  check<T, 16>(name, 4, 4, {4}, 1.0, 0.0, tol, 2, {1});
  check<T, 32>(name, 1, 4, {2, 2}, 0.5, 2.0, tol, 2, {0, 64});
  check<T, 32>(name, 1, 3, {1, 2}, 1.0, 0.0, tol, 2, {0, 32});
  check<T, 16>(name, 3, 4, {2, 2}, -1.5, 0.5, tol, 2, {0, 64});
}

int main(int argc, char **argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  if (only.empty() || only == "ring") {
    ring_suite<__half>("f16", 4e-3);
    ring_suite<__nv_bfloat16>("bf16", 2e-2);
  }
  if (only.empty() || only == "f64") suite<double>("f64", 1e-13);
  if (only.empty() || only == "f16") suite<__half>("f16", 4e-3);
  if (only.empty() || only == "bf16") suite<__nv_bfloat16>("bf16", 2e-2);
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
