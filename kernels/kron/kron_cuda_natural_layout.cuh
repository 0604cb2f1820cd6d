// The shared-memory layout helpers of the natural-order kernels (kron_cuda_natural.cuh for
// float32 as 3xTF32, kron_cuda_natural_mma.cuh for float64, float16 and bfloat16): a tile is
// held in chunks of 4 elements (16 bytes for float32), and these permutations of chunk indices
// spread a warp's accesses over the banks.  Host-compilable (the kernels' emulator uses them).
#ifndef KRONLINALG_KRON_CUDA_NATURAL_LAYOUT_CUH
#define KRONLINALG_KRON_CUDA_NATURAL_LAYOUT_CUH

#include <cstdint>

#include "kron_cuda_common.cuh"

namespace kl {
namespace cu {

// Fold of the chunk index above bit 3 into 2 bits (XOR of its 2-bit digits).
__host__ __device__ __forceinline__ uint32_t fold2(uint32_t x) {
  x ^= x >> 8;
  x ^= x >> 4;
  x ^= x >> 2;
  return x & 3;
}
__host__ __device__ __forceinline__ uint32_t phys_chunk_nat(uint32_t L) {
  return L ^ (fold2(L >> 3) << 1);
}

// Chunk c of row `row` of a row-major tile with P elements per row (buf1 of line tiles, and the
// factors' Ft): bit 2 XORed by the row's parity where a row spans 8 chunks or more, so that the
// two rows of a quarter-warp's 16-byte loads fall in different banks.
template <int P>
__host__ __device__ __forceinline__ int row_chunk(int row, int c) {
  return row * (P / 4) + (P >= 32 ? c ^ ((row & 1) << 2) : c);
}

// Byte offset of swizzled chunk L.  phys_chunk_nat is linear over XOR (fold2 is), so where L is
// built from fields in disjoint bits, its offset is the XOR of the fields' offsets.
__host__ __device__ __forceinline__ uint32_t phys_bytes(uint32_t L) {
  return phys_chunk_nat(L) << 4;
}

// The bits the swizzle flips in chunk L's offset (phys_bytes(L) = (L << 4) ^ these).
__host__ __device__ __forceinline__ uint32_t swizzle_bytes(uint32_t L) {
  return phys_bytes(L) ^ (L << 4);
}

__host__ __device__ constexpr int log2_pow2(int v) { return v <= 1 ? 0 : 1 + log2_pow2(v / 2); }
// (the same at run time, v a power of two >= 1)
__device__ __forceinline__ int ilog2(uint32_t v) { return 31 - __clz(v); }

}  // namespace cu
}  // namespace kl

#endif
