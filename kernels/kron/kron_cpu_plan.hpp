// How the CPU kernel splits the factors into memory passes (ISA independent).
#ifndef KRONLINALG_KRON_CPU_PLAN_HPP
#define KRONLINALG_KRON_CPU_PLAN_HPP

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kron.h"

namespace kl {

struct PassPlan {
  int last, count;       // factors [last - count + 1, last], applied last first
  int64_t S;             // block instances per row
  int64_t Bin, Bout;     // block length before / after the pass
  int64_t maxblock;      // longest intermediate block inside the pass
  int64_t len_out;       // row length after the pass (S * Bout)
};

// Both ping-pong blocks of one tile should stay in L2 (1-2 MiB on current x86 cores).
constexpr int64_t kBlockBudgetBytes = 512 * 1024;

// Greedy from the last factor: extend the group while the tile's two blocks fit the budget and
// the pass keeps at least a quarter of the SIMD lanes busy (`lanes` blocks are computed side by
// side: fusing a tiny product down to a block or two computes mostly on idle lanes, and one more
// pass over a few KiB is cheaper; a quarter busy still beats the extra pass).
inline std::vector<PassPlan> plan_passes(const kl_kron_problem *p, int64_t lane_bytes,
                                         int64_t lanes = 1) {
  std::vector<PassPlan> out;
  const int n = p->nfactors;
  int64_t len = 1;
  for (int i = 0; i < n; ++i) len *= p->P[i];
  const int cap = p->max_fused > 0 ? p->max_fused : n;
  const int64_t rows = p->m1 * p->m2;
  int i = n - 1;
  while (i >= 0) {
    PassPlan g{};
    g.last = i;
    g.count = 0;
    g.Bin = 1;
    g.maxblock = 1;
    int64_t done_q = 1;  // product of Q over factors already in the group
    while (i >= 0 && g.count < cap) {
      const int64_t bin = g.Bin * p->P[i];
      // every block so far grows by P[i] (still unapplied); the new last step ends at done_q*Q[i]
      const int64_t peak = std::max<int64_t>(g.maxblock * p->P[i], done_q * p->Q[i]);
      if (g.count > 0 && 2 * peak * lane_bytes > kBlockBudgetBytes) break;
      if (g.count > 0 && 4 * rows * (len / bin) < lanes) break;
      g.Bin = bin;
      g.maxblock = peak;
      done_q *= p->Q[i];
      ++g.count;
      --i;
    }
    g.Bout = done_q;
    g.S = g.Bin ? len / g.Bin : 0;
    g.len_out = g.S * g.Bout;
    len = g.len_out;
    out.push_back(g);
  }
  return out;
}

}  // namespace kl

#endif
