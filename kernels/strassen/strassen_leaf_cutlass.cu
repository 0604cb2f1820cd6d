// The CUTLASS-mainloop FP64 leaves that strassen_matmul launches (built only with CUTLASS's
// headers: KL_HAVE_CUTLASS).  Two instantiations: 128 x 128 CTA tiles of 8 warps with m16n8k4
// (CUTLASS's own sm_90 FP64 choice) and 128 x 64 tiles of 4 warps (two CTAs an SM).
// KRONLINALG_STRASSEN_LEAF picks one for comparisons (0: our own mma.sync kernel; 1, 2: these);
// benchmarks/strassen_leaf_bench.cu measures them against cuBLAS.  (A third, 128 x 128 with
// m16n8k8, gave wrong results on the H100 on 2026-11-27 - max difference 3e2 at 2048 - and was
// removed rather than kept behind the knob.)
#include "strassen_leaf_cutlass.cuh"

#include <climits>

#include "knobs.hpp"
#include "strassen_leaf_cutlass.h"

namespace kl_strassen {

namespace {
using LeafK4 = CutlassLeafF64<128, 128, 16, 32, 64, 3, 4>;
using Leaf128x64 = CutlassLeafF64<128, 64, 16, 64, 32, 3, 4>;
constexpr int kDefaultLeaf = 1;  // measured on the H100: docs/strassen_matmul.md's leaf table
}  // namespace

int cutlass_leaf_choice() {
  static const int choice = kl::knob_int("KRONLINALG_STRASSEN_LEAF", -1);
  return choice < 0 ? kDefaultLeaf : choice;
}

bool cutlass_leaves_f64(const kl_strassen_sum_leaves &p, cudaStream_t s, cudaError_t *err) {
  const int choice = cutlass_leaf_choice();
  if (choice < 1 || choice > 2) return false;
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) return false;
  for (int l = 0; l < p.count; ++l)
    if (p.leaf[l].nx != 1 || p.leaf[l].ny != 1) return false;
  *err = choice == 1 ? launch_leaf_f64_cutlass<LeafK4>(p, s)
                     : launch_leaf_f64_cutlass<Leaf128x64>(p, s);
  return true;
}

bool cutlass_leaf_tile(int *tile) {
  const int choice = cutlass_leaf_choice();
  if (choice < 1 || choice > 2) return false;
  tile[0] = 128;
  tile[1] = choice == 2 ? 64 : 128;
  return true;
}

}  // namespace kl_strassen
