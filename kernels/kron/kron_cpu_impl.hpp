// The CPU sliced-multiply kernel, written once and compiled once per instruction set
// (kron_cpu_avx512.cpp, kron_cpu_avx2.cpp, kron_cpu_generic.cpp define KL_ISA before including it).
//
// Layout of the work.  Factors are grouped into passes; a pass applies a run of consecutive
// factors (last first) to every "block instance": one row m of the current matrix and one prefix j
// of that row, whose Bin = prod(P) contiguous elements are transformed independently (FastKron's
// fusion, done in cache instead of shared memory).  LW instances are processed together, one per
// SIMD lane, so every step is a plain broadcast-FMA over lanes whatever P and Q are: no shuffles,
// no masks, no dependence on P being a multiple of the vector width.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kron.h"
#include "kron_cpu_plan.hpp"
#include "scratch.hpp"

namespace kl {
namespace KL_ISA {

template <class T>
struct Lanes {
  // Two 512-bit registers' worth of lanes: enough independent FMA chains to hide latency.
  static constexpr int width = 128 / sizeof(T);
  typedef T vec __attribute__((vector_size(128), aligned(64)));
};

template <class T>
using vec_t = typename Lanes<T>::vec;

// One step inside a block: out[q*R + r] = sum_p in[r*P + p] * F[p, q] (F packed row-major).
// Writing q-major is what puts each output at its final place after the last step.
template <class T>
static void step(const vec_t<T> *__restrict in, vec_t<T> *__restrict out, int64_t R, int64_t P,
                 int64_t Q, const T *__restrict F) {
  typedef vec_t<T> V;
  for (int64_t r = 0; r < R; ++r) {
    const V *a = in + r * P;
    int64_t q = 0;
    for (; q + 4 <= Q; q += 4) {
      V c0 = {}, c1 = {}, c2 = {}, c3 = {};
      const T *f = F + q;
      for (int64_t p = 0; p < P; ++p) {
        const V x = a[p];
        c0 += x * f[0];
        c1 += x * f[1];
        c2 += x * f[2];
        c3 += x * f[3];
        f += Q;
      }
      out[(q + 0) * R + r] = c0;
      out[(q + 1) * R + r] = c1;
      out[(q + 2) * R + r] = c2;
      out[(q + 3) * R + r] = c3;
    }
    for (; q < Q; ++q) {
      V c0 = {}, c1 = {};
      const T *f = F + q;
      int64_t p = 0;
      for (; p + 2 <= P; p += 2) {
        c0 += a[p] * f[0];
        c1 += a[p + 1] * f[Q];
        f += 2 * Q;
      }
      if (p < P) c0 += a[p] * f[0];
      out[q * R + r] = c0 + c1;
    }
  }
}

// The three axes of block instances: rows m1, rows m2 and prefixes j, each with its input and
// output stride.  One axis runs across the SIMD lanes, the other two are walked per tile.
struct Axis {
  int64_t n, in, out;
};

struct TileMap {
  Axis lane, a, b;  // lanes, outer, middle
  int64_t chunks;   // tiles along the lane axis

  // Lanes go along the axis whose outputs are contiguous (a vector store), unless it is too short
  // to fill the lanes; then along the longest axis.
  TileMap(Axis m1, Axis m2, Axis j, int lw) {
    Axis ax[3] = {m1, m2, j};
    int pick = -1;
    for (int i = 2; i >= 0; --i)
      if (ax[i].out == 1 && ax[i].n >= lw) pick = i;
    if (pick < 0) {
      pick = 2;
      for (int i = 1; i >= 0; --i)
        if (ax[i].n > ax[pick].n) pick = i;
    }
    lane = ax[pick];
    int k = 0;
    Axis rest[2];
    for (int i = 0; i < 3; ++i)
      if (i != pick) rest[k++] = ax[i];
    a = rest[0];
    b = rest[1];
    chunks = (lane.n + lw - 1) / lw;
  }
  int64_t tiles() const { return a.n * b.n * chunks; }
};

template <class T>
struct PassArgs {
  int64_t m1, m2, S, Bin, Bout, maxblock;
  int nsteps;
  const int64_t *P, *Q;  // per step, in application order
  const T *const *F;     // packed row-major factors, per step
  const T *in;
  int64_t irs1, irs2, ies;
  T *out;
  int64_t ors1, ors2, oes;
  T alpha, beta;
};

template <class T>
static void gather(const PassArgs<T> &a, const T *src, int64_t ls, int nv, vec_t<T> *buf) {
  constexpr int LW = Lanes<T>::width;
  T *b = reinterpret_cast<T *>(buf);
  if (nv == LW && ls == 1) {  // lanes contiguous (left products): whole-vector loads
    for (int64_t e = 0; e < a.Bin; ++e) std::memcpy(b + e * LW, src + e * a.ies, sizeof(vec_t<T>));
    return;
  }
  if (a.ies == 1) {  // each lane reads a contiguous block (right products): transpose in cache
    for (int l = 0; l < nv; ++l) {
      const T *row = src + l * ls;
      for (int64_t e = 0; e < a.Bin; ++e) b[e * LW + l] = row[e];
    }
  } else {
    for (int l = 0; l < nv; ++l) {
      const T *row = src + l * ls;
      for (int64_t e = 0; e < a.Bin; ++e) b[e * LW + l] = row[e * a.ies];
    }
  }
  if (nv < LW)  // idle lanes compute on zeros and are never stored
    for (int64_t e = 0; e < a.Bin; ++e)
      for (int l = nv; l < LW; ++l) b[e * LW + l] = T(0);
}

template <class T>
static void scatter(const PassArgs<T> &a, T *dst0, int64_t ls, int nv, const vec_t<T> *buf) {
  constexpr int LW = Lanes<T>::width;
  typedef vec_t<T> V;
  const T *b = reinterpret_cast<const T *>(buf);
  const int64_t ks = a.S * a.oes;  // output element k of an instance sits k*S*oes further on
  if (nv == LW && ls == 1) {
    T *dst = dst0;
    for (int64_t k = 0; k < a.Bout; ++k) {
      V v = buf[k] * a.alpha;
      if (a.beta != T(0)) {
        V old;
        std::memcpy(&old, dst + k * ks, sizeof(V));
        v += old * a.beta;
      }
      std::memcpy(dst + k * ks, &v, sizeof(V));
    }
    return;
  }
  for (int l = 0; l < nv; ++l) {
    T *dst = dst0 + l * ls;
    if (a.beta != T(0)) {
      for (int64_t k = 0; k < a.Bout; ++k)
        dst[k * ks] = a.alpha * b[k * LW + l] + a.beta * dst[k * ks];
    } else {
      for (int64_t k = 0; k < a.Bout; ++k) dst[k * ks] = a.alpha * b[k * LW + l];
    }
  }
}

template <class T>
static void run_pass(const PassArgs<T> &a, int num_threads) {
  constexpr int LW = Lanes<T>::width;
  typedef vec_t<T> V;
  const int64_t ninst = a.m1 * a.m2 * a.S;
  if (ninst == 0) return;
  const TileMap map(Axis{a.m1, a.irs1, a.ors1}, Axis{a.m2, a.irs2, a.ors2},
                    Axis{a.S, a.Bin * a.ies, a.oes}, LW);
  const int64_t ntiles = map.tiles();
  // Threads only pay off with real work per tile; tiny products stay on the caller's thread.
  const double work = double(ntiles) * double(a.maxblock) * double(a.nsteps);
  int threads = num_threads;
  if (work < 4.0e4) threads = 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    V *buf0 = static_cast<V *>(::operator new(sizeof(V) * a.maxblock, std::align_val_t(64)));
    V *buf1 = static_cast<V *>(::operator new(sizeof(V) * a.maxblock, std::align_val_t(64)));
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < ntiles; ++tile) {
      const int64_t c = tile % map.chunks, ab = tile / map.chunks;
      const int64_t ib = ab % map.b.n, ia = ab / map.b.n;
      const int64_t f0 = c * LW;
      const int nv = int(std::min<int64_t>(LW, map.lane.n - f0));
      const T *src = a.in + ia * map.a.in + ib * map.b.in + f0 * map.lane.in;
      T *dst = a.out + ia * map.a.out + ib * map.b.out + f0 * map.lane.out;
      gather(a, src, map.lane.in, nv, buf0);
      V *cur = buf0, *nxt = buf1;
      int64_t size = a.Bin;
      for (int s = 0; s < a.nsteps; ++s) {
        const int64_t R = size / a.P[s];
        step<T>(cur, nxt, R, a.P[s], a.Q[s], a.F[s]);
        size = R * a.Q[s];
        std::swap(cur, nxt);
      }
      scatter(a, dst, map.lane.out, nv, cur);
    }
    ::operator delete(buf0, std::align_val_t(64));
    ::operator delete(buf1, std::align_val_t(64));
  }
}

template <class T>
static int kron_matmul(const kl_kron_problem *p, int num_threads) {
  constexpr int LW = Lanes<T>::width;
  const int n = p->nfactors;
  const int64_t M = p->m1 * p->m2;
  // Pack each factor row-major once: the inner loop then walks it with unit stride.
  std::vector<std::vector<T>> packed(n);
  for (int i = 0; i < n; ++i) {
    const T *f = static_cast<const T *>(p->F[i]);
    packed[i].resize(size_t(p->P[i] * p->Q[i]));
    for (int64_t r = 0; r < p->P[i]; ++r)
      for (int64_t c = 0; c < p->Q[i]; ++c)
        packed[i][size_t(r * p->Q[i] + c)] = f[r * p->F_rs[i] + c * p->F_cs[i]];
  }
  const std::vector<PassPlan> passes = plan_passes(p, sizeof(T) * LW);

  // Intermediates follow the output's layout so each pass's writes stay contiguous.
  const bool row_layout = p->y_es == 1 || p->m2 == 1;
  int64_t scratch = 0;
  for (size_t g = 0; g + 1 < passes.size(); ++g) scratch = std::max(scratch, passes[g].len_out);
  ScratchLease lease(passes.size() > 1 ? size_t(scratch * M) * sizeof(T) * (passes.size() > 2 ? 2 : 1) : 0);
  T *tmp[2] = {static_cast<T *>(lease.data()), static_cast<T *>(lease.data()) + scratch * M};

  const T *in = static_cast<const T *>(p->x);
  int64_t irs1 = p->x_rs1, irs2 = p->x_rs2, ies = p->x_es;
  for (size_t g = 0; g < passes.size(); ++g) {
    const PassPlan &pp = passes[g];
    const bool last = g + 1 == passes.size();
    PassArgs<T> a;
    a.m1 = p->m1;
    a.m2 = p->m2;
    a.S = pp.S;
    a.Bin = pp.Bin;
    a.Bout = pp.Bout;
    a.maxblock = pp.maxblock;
    a.nsteps = pp.count;
    std::vector<int64_t> P(pp.count), Q(pp.count);
    std::vector<const T *> F(pp.count);
    for (int s = 0; s < pp.count; ++s) {
      const int i = pp.last - s;  // last factor of the group first
      P[s] = p->P[i];
      Q[s] = p->Q[i];
      F[s] = packed[i].data();
    }
    a.P = P.data();
    a.Q = Q.data();
    a.F = F.data();
    a.in = in;
    a.irs1 = irs1;
    a.irs2 = irs2;
    a.ies = ies;
    if (last) {
      a.out = static_cast<T *>(p->y);
      a.ors1 = p->y_rs1;
      a.ors2 = p->y_rs2;
      a.oes = p->y_es;
      a.alpha = T(p->alpha);
      a.beta = T(p->beta);
    } else {
      a.out = tmp[g % 2];
      if (row_layout) {
        a.ors1 = p->m2 * pp.len_out;
        a.ors2 = pp.len_out;
        a.oes = 1;
      } else {
        a.ors1 = p->m2 * pp.len_out;
        a.ors2 = 1;
        a.oes = p->m2;
      }
      a.alpha = T(1);
      a.beta = T(0);
    }
    run_pass(a, num_threads);
    in = a.out;
    irs1 = a.ors1;
    irs2 = a.ors2;
    ies = a.oes;
  }
  return KL_OK;
}

int kron_matmul_entry(const kl_kron_problem *p, int dtype, int num_threads) {
  try {
    if (dtype == KL_FLOAT32) return kron_matmul<float>(p, num_threads);
    if (dtype == KL_FLOAT64) return kron_matmul<double>(p, num_threads);
    return fail(KL_ERR_INVALID, "kron_matmul_cpu: unsupported dtype");
  } catch (const std::bad_alloc &) {
    return fail(KL_ERR_ALLOC, "kron_matmul_cpu: out of host memory for intermediates");
  }
}

int lane_bytes(int dtype) { return dtype == KL_FLOAT32 ? sizeof(float) * Lanes<float>::width : sizeof(double) * Lanes<double>::width; }

}  // namespace KL_ISA
}  // namespace kl
