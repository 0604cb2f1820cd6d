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
  // Row-major results (right products): a pass computes its lanes side by side along the prefixes
  // j of a row, whose outputs are contiguous (vector stores).  Fusing down to fewer than three
  // quarters of `lanes` prefixes (TileMap's rule) would move the lanes onto the rows, whose
  // outputs lie a row apart with a stride (one scalar store per element): one more pass over the
  // data is cheaper.  A whole row is the exception: each lane's outputs are then contiguous,
  // stored by in-register transposes in the AVX-512 build (element by element in the others, as
  // every whole-row pass was before).
  const bool lanes_on_prefixes = p->y_es == 1 || p->m2 == 1;
  int i = n - 1;
  // Whether factors [0, from] fit one pass that takes whole rows (blocks of the full row length
  // `row`, so one instance per row: only the first pass can, where no factor is applied yet).
  auto whole_rows_fit = [&](int from, int64_t row) {
    if (from + 1 > cap || rows < lanes) return false;
    int64_t bin = 1, block = 1, dq = 1;
    for (int k = from; k >= 0; --k) {
      bin *= p->P[k];
      block = std::max<int64_t>(block * p->P[k], dq * p->Q[k]);
      dq *= p->Q[k];
      if (k < from && 2 * block * lane_bytes > kBlockBudgetBytes) return false;
    }
    return bin == row;
  };
  while (i >= 0) {
    const bool whole_row = lanes_on_prefixes && whole_rows_fit(i, len);
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
      if (g.count > 0 && lanes_on_prefixes && !whole_row && 4 * (len / bin) < 3 * lanes &&
          4 * (len / g.Bin) >= 3 * lanes)
        break;
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
