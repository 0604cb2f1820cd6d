// Hopper warpgroup MMA (wgmma.mma_async, sm_90a): both operands read from shared memory through
// matrix descriptors, float32 accumulators in registers.  Compiled where the target has the
// sm_90a features (KL_HAS_WGMMA); elsewhere the wrappers trap, and the launchers never select the
// kernels that use them (KL_WGMMA_BUILT on the host says whether sm_90a code was built).
#ifndef KRONLINALG_CUDA_WGMMA_CUH
#define KRONLINALG_CUDA_WGMMA_CUH

#include "cuda_ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KL_HAS_WGMMA 1
#else
#define KL_HAS_WGMMA 0
#endif

namespace kl {
namespace cu {

// Descriptor of a K-major tile of 16-bit values in rows of ROW = 64 or 128 bytes (32 or 64
// values of the contraction index) with the swizzle of that width: 8-row groups 8·ROW bytes
// apart, the 16-byte chunks of row r XORed with (r / (128 / ROW)) % (ROW / 16) (the layout
// SwizzledRows writes).  The tile starts on an 8·ROW-byte boundary; one k16 step further along
// the row is +32 bytes (desc + 2).
template <int ROW>
__device__ __forceinline__ uint64_t wgmma_desc_swizzled(const void *tile) {
  static_assert(ROW == 64 || ROW == 128, "64- or 128-byte swizzle");
  const uint64_t addr = smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4)                 // start address, 16-byte units
         | (uint64_t(1) << 16)                   // leading byte offset: unused for swizzled K-major
         | (uint64_t(8 * ROW >> 4) << 32)        // stride byte offset: 8 rows
         | (uint64_t(ROW == 128 ? 1 : 2) << 62);  // swizzle mode
}

// Descriptor of an MN-major tile of 16-bit values with the 128-byte swizzle (the transposed
// operand of wgmma: imm-trans 1): rows of the contraction index, each 64 values of M or N (128
// bytes, the 16-byte chunks of row r XORed with r % 8), 8-row groups 1024 bytes apart (stride
// byte offset), the next 64 values of M or N `mn_bytes` further on (leading byte offset; CUTLASS's
// canonical MN-major SW128 layout ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units).  The tile
// starts on a 1024-byte boundary; one k16 step further is +2048 bytes (desc + 128).
__device__ __forceinline__ uint64_t wgmma_desc_mn128(const void *tile, uint32_t mn_bytes) {
  const uint64_t addr = smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4)                      // start address, 16-byte units
         | (uint64_t((mn_bytes >> 4) & 0x3FFF) << 16)  // leading byte offset: the next 64 of M/N
         | (uint64_t(1024 >> 4) << 32)                 // stride byte offset: 8 rows of k
         | (uint64_t(1) << 62);                        // 128-byte swizzle
}

__device__ __forceinline__ void wgmma_fence() {
#if KL_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if KL_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if KL_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64 x N) += A(64 x 16) · B(16 x N) for the warpgroup, A K-major in shared memory, B K-major
// (or MN-major: TRANS_B); BF16:
// bfloat16 inputs, else float16.  Thread t of the warpgroup holds rows 16·(t / 32) + (t % 32) / 4
// (+ 8) and columns 8·i + 2·(t % 4) (+ 1) of D in d[4·i ..].
// The accumulator operands and their placeholders, 32 or 64 of them.
#define KL_WGMMA_ACC32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
  "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KL_WGMMA_ACC64 \
  KL_WGMMA_ACC32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
  "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
  "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
  "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
  "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KL_WGMMA_R32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, \
  %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KL_WGMMA_REGS32 "{" KL_WGMMA_R32 "}, "
#define KL_WGMMA_REGS64 \
  "{" KL_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, \
  %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
// One wgmma of shape m64n<N>k16 on inputs TY (f16, bf16) into R accumulators: descriptors
// %A and %B, scale-d from the predicate set from %S (1: accumulate), B K-major (TB 0) or
// MN-major (TB 1: wgmma_desc_mn128).
#define KL_WGMMA_SS(N, TY, R, A, B, S, TB)                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n"                          \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "           \
               KL_WGMMA_REGS##R "%" #A ", %" #B ", p, 1, 1, 0, " #TB ";\n}\n"             \
               : KL_WGMMA_ACC##R                                                            \
               : "l"(da), "l"(db), "r"(1))
template <int N, bool BF16, bool TRANS_B = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db) {
  static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
#if KL_HAS_WGMMA
  if constexpr (N == 64 && !BF16 && !TRANS_B) KL_WGMMA_SS(64, f16, 32, 32, 33, 34, 0);
  else if constexpr (N == 64 && !TRANS_B) KL_WGMMA_SS(64, bf16, 32, 32, 33, 34, 0);
  else if constexpr (!BF16 && !TRANS_B) KL_WGMMA_SS(128, f16, 64, 64, 65, 66, 0);
  else if constexpr (!TRANS_B) KL_WGMMA_SS(128, bf16, 64, 64, 65, 66, 0);
  else if constexpr (N == 64 && !BF16) KL_WGMMA_SS(64, f16, 32, 32, 33, 34, 1);
  else if constexpr (N == 64) KL_WGMMA_SS(64, bf16, 32, 32, 33, 34, 1);
  else if constexpr (!BF16) KL_WGMMA_SS(128, f16, 64, 64, 65, 66, 1);
  else KL_WGMMA_SS(128, bf16, 64, 64, 65, 66, 1);
#else
  __trap();
#endif
}
#undef KL_WGMMA_SS
#undef KL_WGMMA_ACC32
#undef KL_WGMMA_ACC64
#undef KL_WGMMA_REGS32
#undef KL_WGMMA_REGS64
#undef KL_WGMMA_R32

}  // namespace cu
}  // namespace kl

#endif
