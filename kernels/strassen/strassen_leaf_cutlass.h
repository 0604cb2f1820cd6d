// The CUTLASS leaves' entry for strassen_cuda.cu (strassen_leaf_cutlass.cu; KL_HAVE_CUTLASS).
#ifndef KRONLINALG_STRASSEN_LEAF_CUTLASS_H
#define KRONLINALG_STRASSEN_LEAF_CUTLASS_H

#include <cuda_runtime.h>

#include "strassen.h"

namespace kl_strassen {

// Launches p on a CUTLASS leaf when one applies (KRONLINALG_STRASSEN_LEAF is not 0, one source
// per operand, sizes below 2^31) and returns true with the launch's status in *err; false: the
// caller launches its own kernel.  Needs sm_90 (the caller checks).
bool cutlass_leaves_f64(const kl_strassen_sum_leaves &p, cudaStream_t s, cudaError_t *err);

// KRONLINALG_STRASSEN_LEAF, or the built default where it is unset (0: the own kernel).
int cutlass_leaf_choice();

// The chosen CUTLASS leaf's output tile (rows, columns); false where the own kernel is chosen.
bool cutlass_leaf_tile(int *tile);

}  // namespace kl_strassen

#endif
