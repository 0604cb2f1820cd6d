// Runs the baseline / AVX2 / AVX-512 builds of the CPU batched kernel (the ones this machine
// can run) on the same problems and checks each against a float64 reference: the run-time
// dispatch picks only the best one, so the others are otherwise never run where CI runs.
// Built and run by tests/test_batched_cpu.py (not part of the library).
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include "batched.h"
namespace kl {
namespace generic { int batched_entry(const kl_batched_problem *p, int dtype, int num_threads); }
namespace avx2 { int batched_entry(const kl_batched_problem *p, int dtype, int num_threads); }
namespace avx512 { int batched_entry(const kl_batched_problem *p, int dtype, int num_threads); }
}
typedef int (*Entry)(const kl_batched_problem *, int, int);

template <class T>
int check(Entry f, const char *name, int m, int k, int n, int batch, bool at, int threads) {
  std::mt19937 g(m * 1000 + k * 10 + n);
  std::normal_distribution<double> d;
  std::vector<T> A(batch * m * k), B(batch * k * n), D(batch * m * n, T(NAN));
  for (auto &x : A) x = T(d(g));
  for (auto &x : B) x = T(d(g));
  kl_batched_problem p{};
  p.m = m; p.n = n; p.k = k; p.ndim = 1; p.shape[0] = batch;
  p.a_bs[0] = m * k; p.b_bs[0] = k * n; p.d_bs[0] = m * n;
  p.a = A.data(); p.b = B.data(); p.d = D.data();
  if (at) { p.a_rs = 1; p.a_cs = m; } else { p.a_rs = k; p.a_cs = 1; }
  p.b_rs = n; p.b_cs = 1; p.d_rs = n; p.d_cs = 1; p.alpha = 1.5; p.beta = 0;
  if (f(&p, sizeof(T) == 8 ? KL_BATCHED_F64 : KL_BATCHED_F32, threads) != 0) return 1;
  int bad = 0;
  for (int s = 0; s < batch; ++s)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double ref = 0, scale = 0;
        for (int q = 0; q < k; ++q) {
          double a = A[s * m * k + i * p.a_rs + q * p.a_cs], b = B[s * k * n + q * n + j];
          ref += a * b; scale += std::fabs(a * b);
        }
        double got = D[s * m * n + i * n + j];
        double eps = sizeof(T) == 8 ? 2.2e-16 : 1.2e-7;
        if (!(std::fabs(got - 1.5 * ref) <= 2 * (k + 2) * eps * 1.5 * scale + 1e-30)) ++bad;
      }
  if (bad) std::printf("%s %s m=%d k=%d n=%d at=%d: %d wrong\n", name, sizeof(T) == 8 ? "f64" : "f32", m, k, n, at, bad);
  return bad != 0;
}

int main() {
  Entry fs[3] = {kl::generic::batched_entry, kl::avx2::batched_entry, kl::avx512::batched_entry};
  const char *names[3] = {"generic", "avx2", "avx512"};
  __builtin_cpu_init();
  const int isas = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") ? 3
                   : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")      ? 2
                                                                                          : 1;
  int fails = 0, runs = 0;
  for (int e = 0; e < isas; ++e)
    for (int at = 0; at < 2; ++at)
      for (int m = 1; m <= 34; m += (m < 12 ? 1 : 7))
        for (int k : {1, 2, 3, 5, 8, 13, 32, 33})
          for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33}) {
            int mm = m, kk = k;
            if (m <= 8 && (m + k + n) % 2 == 0) kk = n = mm;  // squares for the small path
            fails += check<double>(fs[e], names[e], mm, kk, n, 23, at, 1);
            fails += check<float>(fs[e], names[e], mm, kk, n, 23, at, 1);
            runs += 2;
          }
  // the pool: a stack above 1e6 flops on 2 threads
  for (int e = 0; e < isas; ++e) {
    fails += check<double>(fs[e], names[e], 16, 16, 16, 500, false, 2);
    fails += check<float>(fs[e], names[e], 5, 5, 5, 3000, false, 2);
    runs += 2;
  }
  std::printf("%d ISA builds: %d of %d failed\n", isas, fails, runs);
  return fails != 0;
}
