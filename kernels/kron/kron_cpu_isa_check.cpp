// A standalone check of one ISA build of the CPU kron kernel against a float64 reference, so the
// builds this machine would not dispatch to (AVX2, generic on an AVX-512 CPU) are checked too.
// Not part of the library; tests/test_kron_cpu_kernel.py compiles and runs it once per ISA:
//
//   c++ -O2 -std=c++17 -fopenmp -mavx2 -mfma -DKL_X86_ISAS -DKL_ISA=avx2 -DKL_VEC_BYTES=32
//       -Ikernels/kron -Ikernels/include -Ikernels/common kernels/kron/kron_cpu_isa_check.cpp
//       kernels/common/status.cpp kernels/common/scratch.cpp -o check && ./check
//
// (one command; KL_VEC_BYTES 64 with the AVX-512 flags of kernels/meson.build, 16 and no flags
// for the generic build).
//
// Prints one line per failing case and "ok N" at the end; exits non-zero on any failure.
#include "kron_cpu_impl.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

struct Case {
  int64_t m;
  std::vector<std::pair<int64_t, int64_t>> shapes;
};

// Odd row counts, non-power-of-two and non-square factors, chains long enough for several
// passes, inputs of several MiB (the fetch-ahead path), rows that fill a partial lane group.
std::vector<Case> cases() {
  auto sq = [](int64_t p, int n) { return std::vector<std::pair<int64_t, int64_t>>(n, {p, p}); };
  std::vector<Case> out = {
      {45, sq(8, 3)},          {33, sq(3, 5)},         {70, {{5, 7}, {3, 2}, {11, 4}}},
      {97, {{7, 5}, {2, 3}}},  {67, sq(4, 7)},          {5, sq(3, 7)},
      {1031, sq(2, 9)},        {19, sq(16, 3)},        {3, {{1, 6}, {5, 1}, {7, 7}}},
      {40, {{33, 17}, {5, 9}}}, {10, {{52, 50}, {65, 20}}}, {50, {{32, 8}, {64, 128}}},
      {37, {{16, 16}, {16, 15}, {16, 16}, {16, 16}}}, {1, {{5, 5}, {5, 5}, {5, 5}, {2, 2}}},
      {29, sq(3, 8)},          {13, sq(5, 5)},         {3, sq(128, 2)},
  };
  return out;
}

template <class T>
bool check(const Case &c, double beta, int threads, double tol) {
  const int n = int(c.shapes.size());
  std::vector<int64_t> P(n), Q(n), rs(n), cs(n, 1);
  int64_t K = 1, L = 1;
  for (int i = 0; i < n; ++i) {
    P[i] = c.shapes[i].first;
    Q[i] = c.shapes[i].second;
    rs[i] = Q[i];
    K *= P[i];
    L *= Q[i];
  }
  std::mt19937 gen(unsigned(K * 31 + L * 7 + c.m));
  std::normal_distribution<double> normal;
  const int64_t xs = K + 3, ys = L + 5;  // rows a gap apart in x and y
  std::vector<T> x(size_t(c.m * xs)), y(size_t(c.m * ys)), y0;
  for (auto &v : x) v = T(normal(gen));
  for (auto &v : y) v = beta == 0.0 ? T(NAN) : T(normal(gen));
  y0 = y;
  std::vector<std::vector<T>> F(n);
  std::vector<const void *> Fp(n);
  for (int i = 0; i < n; ++i) {
    F[i].resize(size_t(P[i] * Q[i]));
    for (auto &v : F[i]) v = T(normal(gen));
    Fp[i] = F[i].data();
  }
  const double alpha = -1.25;
  kl_kron_problem p{};
  p.m1 = 1;
  p.m2 = c.m;
  p.nfactors = n;
  p.P = P.data();
  p.Q = Q.data();
  p.F = Fp.data();
  p.F_rs = rs.data();
  p.F_cs = cs.data();
  p.x = x.data();
  p.x_rs1 = c.m * xs;
  p.x_rs2 = xs;
  p.x_es = 1;
  p.y = y.data();
  p.y_rs1 = c.m * ys;
  p.y_rs2 = ys;
  p.y_es = 1;
  p.alpha = alpha;
  p.beta = beta;
  if (kl::KL_ISA::kron_matmul_entry(&p, sizeof(T) == 4 ? KL_FLOAT32 : KL_FLOAT64, threads) != 0)
    return false;
  // float64 reference: the factors applied last to first, each output at its final index
  double num = 0, den = 0;
  bool gaps_intact = true;
  for (int64_t r = 0; r < c.m; ++r) {
    std::vector<double> cur(x.begin() + r * xs, x.begin() + r * xs + K), nxt;
    int64_t len = K;
    for (int i = n - 1; i >= 0; --i) {
      const int64_t S = len / P[i];
      nxt.assign(size_t(S * Q[i]), 0.0);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t q = 0; q < Q[i]; ++q) {
          double acc = 0;
          for (int64_t k = 0; k < P[i]; ++k) acc += cur[s * P[i] + k] * double(F[i][k * Q[i] + q]);
          nxt[q * S + s] = acc;
        }
      len = S * Q[i];
      cur.swap(nxt);
    }
    for (int64_t l = 0; l < L; ++l) {
      const double want = alpha * cur[l] + (beta == 0.0 ? 0.0 : beta * double(y0[r * ys + l]));
      const double got = double(y[r * ys + l]);
      num += (got - want) * (got - want);
      den += want * want;
    }
    for (int64_t l = L; l < ys; ++l)
      gaps_intact &= beta == 0.0 ? std::isnan(double(y[r * ys + l])) : y[r * ys + l] == y0[r * ys + l];
  }
  const double err = std::sqrt(num / den);
  return err <= tol && gaps_intact;  // NaN (an unwritten element) fails the comparison
}

}  // namespace

int main() {
  int ok = 0, bad = 0;
  for (const Case &c : cases())
    for (double beta : {0.0, 0.5})
      for (int threads : {1, 2}) {
        const bool f = check<float>(c, beta, threads, 2e-6);
        const bool d = check<double>(c, beta, threads, 1e-13);
        for (int k = 0; k < 2; ++k) {
          if (k == 0 ? f : d) {
            ++ok;
            continue;
          }
          ++bad;
          std::printf("FAIL %s m=%lld factors=%zu beta=%g threads=%d\n",
                      k == 0 ? "float32" : "float64", (long long)c.m, c.shapes.size(), beta,
                      threads);
        }
      }
  std::printf("%s %d\n", bad ? "failed" : "ok", bad ? bad : ok);
  return bad ? 1 : 0;
}
