// The natural-order fused passes (see kron_cuda_natural.cuh, the float32 3xTF32 form, for the
// tile, its steps and its swizzles) for float64 on the FP64 tensor cores (DMMA m16n8k8, sm_90)
// and for float16 / bfloat16 on the half tensor cores (m16n8k16 / m16n8k8, float32 accumulation).
//
// The tile keeps the float32 kernel's layout in chunks of 4 elements: a chunk is 32 bytes for
// float64 (two 16-byte accesses) and 8 bytes for the half types, and every index of the float32
// kernel (row_chunk, phys_chunk_nat, the column views' XOR parts) is reused in chunk units, only
// the byte offset of a chunk scales (chunk << kLcb).  Per k16 block a lane holds the same 4 k
// (4t .. 4t + 3) as in the float32 kernel:
//  - float64: two k8 halves as in 3xTF32 (the f64 m16n8k8 fragments are those of tf32 m16n8k8),
//    one DMMA per half where 3xTF32 takes three;
//  - half: one m16n8k16 whose k slots 2t, 2t + 1, 2t + 8, 2t + 9 stand for k 4t .. 4t + 3 (the
//    same permutation for A and B).  Row steps read A's pairs as they lie; column steps hold 4
//    rows c per k and pack the pairs (two byte permutes per register).
// P = 8 (one k8 block): float64 takes k 2t, 2t + 1 in the slots t, t + 4 of one DMMA, the half
// types one m16n8k8 (k 2t, 2t + 1 as they lie).
// Intermediates between steps stay in the storage type (the half types round each step's
// results to half, as their scratch between passes does).
#ifndef KRONLINALG_KRON_CUDA_NATURAL_MMA_CUH
#define KRONLINALG_KRON_CUDA_NATURAL_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kron_cuda_common.cuh"
#include "kron_cuda_kernels.cuh"  // NatP
#include "kron_cuda_natural_layout.cuh"

namespace kl {
namespace cu {

#ifndef KL_EMU
// (dmma_1688, the float64 m16n8k8 MMA: cuda_ptx.cuh)
// 8-byte global->shared copy (cp.async.ca: the .cg form takes 16 bytes only).
__device__ __forceinline__ void cp_async_8(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 8 : 0)
               : "memory");
}
#endif

// Per storage type: the chunk of 4 elements, the accumulator, conversions.
template <class T>
struct NatType;
template <>
struct NatType<double> {
  using Acc = double;
  static constexpr int kLcb = 5;  // log2 of a chunk's bytes
  struct alignas(16) Chunk {
    double v[4];
  };
  static __device__ __forceinline__ void cp_chunk(void *dst, const void *src, bool valid) {
    cp_async_16(dst, src, valid);
    cp_async_16(static_cast<char *>(dst) + 16, static_cast<const char *>(src) + 16, valid);
  }
  static __device__ __forceinline__ double to(double v) { return v; }
  static __device__ __forceinline__ double from(double v) { return v; }
};
template <class H>
struct NatHalf {
  using Acc = float;
  static constexpr int kLcb = 3;
  struct alignas(8) Chunk {
    uint32_t w[2];  // elements (0, 1) and (2, 3), the lower index in the low half
  };
  static __device__ __forceinline__ void cp_chunk(void *dst, const void *src, bool valid) {
    cp_async_8(dst, src, valid);
  }
  static __device__ __forceinline__ float to(H v) {
    if constexpr (std::is_same<H, __half>::value)
      return __half2float(v);
    else
      return __bfloat162float(v);
  }
  static __device__ __forceinline__ H from(float v) {
    if constexpr (std::is_same<H, __half>::value)
      return __float2half_rn(v);
    else
      return __float2bfloat16_rn(v);
  }
  static __device__ __forceinline__ uint32_t bits(H v) {
    uint16_t b;
    memcpy(&b, &v, 2);
    return b;
  }
  // two values -> one register (a the low half)
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    return bits(from(a)) | (bits(from(b)) << 16);
  }
};
template <>
struct NatType<__half> : NatHalf<__half> {};
template <>
struct NatType<__nv_bfloat16> : NatHalf<__nv_bfloat16> {};

// Blocks of up to natm_max_threads(P) threads, as the float32 kernel, but float64 P = 8 blocks
// of 8 warps (configure_natural); float64 at two blocks per SM by registers (its accumulators
// and A values take twice the registers; P = 8 takes 74 and is compiled for one block of 256
// threads, which leaves it the register cap of two blocks of 128).
template <class T>
__host__ __device__ constexpr int natm_min_blocks(int P) {
  return sizeof(T) == 8 ? (P == 8 ? 1 : 2) : 3;
}
template <class T>
__host__ __device__ constexpr int natm_max_threads(int P) {
  return P == 16 || (sizeof(T) == 8 && P == 8) ? 256 : 128;
}

template <class T, int P, int WN>
struct NatM {
  using E = NatType<T>;
  using Acc = typename E::Acc;
  using Chunk = typename E::Chunk;
  static constexpr bool kHalf = sizeof(T) == 2;
  static constexpr int kLcb = E::kLcb;
  static constexpr int KB = P >= 16 ? P / 16 : 1;
  static constexpr int KH = P >= 16 ? 2 : 1;
  static constexpr int NS = P / 8 / WN;
  static constexpr int LP = log2_pow2(P);

  // Byte offset of chunk L of a column view, swizzled per chunk size (both linear over XOR, so
  // the column views' XOR parts hold; every reader and writer of a view uses this one):
  //  - half (8-byte chunks, a half-warp of 16 lanes per phase: 4 consecutive chunks g x 4 rows
  //    t): bits 2-3 XORed by the 2-bit fold of L >> 4, so that the rows spread over the 4 groups
  //    of 4 chunks of a 128-byte line (the float32 swizzle, bits 1-2 by L >> 3, left 2-way
  //    conflicts here);
  //  - float64 (32-byte chunks, 16-byte accesses by quarter-warps: 2 chunks g x 4 rows t, each
  //    lane's halves in the order h0 = (g ^ t) & 1): bit 1 XORed by the parity of L >> 2, which
  //    with h0 puts the 8 lanes on 8 different 16-byte bank groups for the column views' loads
  //    and stores and the row steps' stores, for any row length (a bank simulation of every
  //    access of P = 8 .. 64 and C = 8 .. 4096: the ideal wavefronts; float32's swizzle took 2x
  //    on half of them).
  static __host__ __device__ __forceinline__ uint32_t phys(uint32_t L) {
    if constexpr (kHalf) {
      return L ^ (fold2(L >> 4) << 2);
    } else {
      uint32_t x = L >> 2;
      x ^= x >> 16;
      x ^= x >> 8;
      x ^= x >> 4;
      x ^= x >> 2;
      x ^= x >> 1;
      return L ^ ((x & 1) << 1);
    }
  }
  static __host__ __device__ __forceinline__ uint32_t off(uint32_t L) { return phys(L) << kLcb; }

  // A column view [a][p][c] of a step (see Nat::ColView), offsets in bytes of this type's chunks.
  struct ColView {
    int lcq;
    uint32_t ld_lane;
    uint32_t ld_u[2 * KH];
    uint32_t ld_kb[KB];
    uint32_t st_lane[2];
    uint32_t st_j[WN];
    __device__ __forceinline__ uint32_t ld(int kb, int u) const {
      return ld_lane ^ ld_u[u] ^ ld_kb[kb];
    }
  };
  static __device__ __forceinline__ ColView col_view(int C, int ns) {
    const int t = threadIdx.x & 3;
    ColView v;
    v.lcq = ilog2(C) - 2;
    v.ld_lane = off(uint32_t(2 * KH * t) << v.lcq);
#pragma unroll
    for (int u = 0; u < 2 * KH; ++u) v.ld_u[u] = off(uint32_t(u) << v.lcq);
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) v.ld_kb[kb] = off(uint32_t(16 * kb) << v.lcq);
#pragma unroll
    for (int h = 0; h < 2; ++h) v.st_lane[h] = off(uint32_t(2 * t + h) << v.lcq);
#pragma unroll
    for (int j = 0; j < WN; ++j) v.st_j[j] = off(uint32_t(8 * (ns * WN + j)) << v.lcq);
    return v;
  }
  // The same view with a table of A's row parts, one per (kb, u): the ring kernel's last step
  // puts each row's slot there (kron_cuda_natural_mma_ring.cuh).
  struct TableView : ColView {
    uint32_t tab[KB][2 * KH];
    __device__ __forceinline__ uint32_t ld(int kb, int u) const { return tab[kb][u]; }
  };
  // The bits the swizzle flips in chunk L's byte offset (off(L) = (L << kLcb) ^ these).
  static __host__ __device__ __forceinline__ uint32_t swz(uint32_t L) {
    return off(L) ^ (L << kLcb);
  }
  static __device__ __forceinline__ uint32_t col_item(const ColView &v, int mg) {
    const uint32_t ch = uint32_t(mg * 8 + ((threadIdx.x & 31) >> 2));
    const uint32_t a = ch >> v.lcq, cc = ch & ((1u << v.lcq) - 1);
    return off((a << (v.lcq + LP)) | cc);
  }

  // Chunk c of row `row` of a row-major tile of P elements per row (line tiles' buf1 and Ft).
  // float64 as float32 (row_chunk).  Half: 8-byte chunks, and a half-warp's 16 lanes read 4
  // rows at once, so P = 32 XORs bit 2 of c by bit 1 of the row and P = 64 bits 2-3 by the
  // row's low 2 bits: the 4 rows' 32-byte runs fall on different banks.  (load_tile steps a
  // thread over a multiple of 4 rows: the XOR of a row's chunk stays that of its first.)
  static __host__ __device__ __forceinline__ int rc(int row, int c) {
    if constexpr (kHalf && P == 32) return row * 8 + (c ^ (((row >> 1) & 1) << 2));
    else if constexpr (kHalf && P == 64) return row * 16 + (c ^ ((row & 3) << 2));
    else return row_chunk<P>(row, c);
  }

  // Factors -> Ft[q][p] (P x P, rc order) per step.
  static __device__ void load_factors(const NatP &p, T *Fs) {
    for (int s = 0; s < p.nsteps; ++s) {
      const T *F = reinterpret_cast<const T *>(p.F[s]);
      T *ft = Fs + s * P * P;
      for (int i = threadIdx.x; i < P * P; i += blockDim.x) {
        const int q = i / P, k = i - q * P;
        ft[rc(q, k >> 2) * 4 + (k & 3)] = F[k * p.frs[s] + q * p.fcs[s]];
      }
    }
  }

  // Tile t's elements -> buf1 (cp.async).  Lines past the matrix are zeros.  A copy takes
  // U chunks: two for the half types (16 bytes: chunk pairs stay adjacent under rc and phys,
  // which leave bit 0 of a chunk index alone, and a tile's rows hold an even number of chunks),
  // one (two 16-byte pieces) for float64.
  static constexpr int U = kHalf ? 2 : 1;
  static __device__ __forceinline__ void cp_unit(char *dst, const T *src, bool valid) {
    if constexpr (kHalf)
      cp_async_16(dst, src, valid);
    else
      E::cp_chunk(dst, src, valid);
  }
  static __device__ void load_tile(const NatP &p, int64_t t, T *buf1) {
    const T *x = reinterpret_cast<const T *>(p.x);
    char *dst = reinterpret_cast<char *>(buf1);
    if (p.line_tile) {
      const int64_t l0 = t * p.T;
      const int64_t nvalid = (p.rows - l0 < p.T ? p.rows - l0 : p.T) * p.Bin;
      const int ncp = p.T * p.Bin / (4 * U), nvalid_cp = int(nvalid / (4 * U));
      constexpr int rowc = P / (4 * U);  // copies per row
      // (a thread's copies step over a multiple of 4 rows: rc of its first plus the step)
      const int c0 = threadIdx.x;
      const T *src = x + l0 * p.Bin + c0 * 4 * U;
      char *d = dst + (uint32_t(rc(c0 / rowc, (c0 % rowc) * U)) << kLcb);
      const int step = blockDim.x;
      for (int c = c0; c < ncp; c += step, src += 4 * U * step, d += (step * U) << kLcb) {
        const bool ok = c < nvalid_cp;
        cp_unit(d, ok ? src : x, ok);
      }
    } else {
      // (copies per element row (a, p): T / 4 / U, a power of two that divides blockDim.x; copy
      // c is chunk U c of the [a][c] plane, and a thread's copies keep their column)
      const int64_t per_row = p.I / p.T;
      const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
      const int lcpr = ilog2(p.T) - 2 - (U - 1);
      const int ncp = p.Bin << lcpr;
      const uint32_t c0 = threadIdx.x;
      const T *src = x + r * p.Bin * p.I + i0 + int64_t(c0 >> lcpr) * p.I +
                     (c0 & ((1u << lcpr) - 1)) * 4 * U;
      const int64_t step = int64_t(blockDim.x >> lcpr) * p.I;
      const uint32_t d0 = off(c0 * U);
      for (uint32_t c = c0; c < uint32_t(ncp); c += blockDim.x, src += step)
        cp_unit(dst + (d0 ^ off((c - c0) * U)), src, true);
    }
  }

  // A chunk from shared memory.  float64: two 16-byte loads, the half h0 first: the lanes of a
  // quarter-warp (g = 0, 1, t = 0..3) read chunks 128 bytes apart per g (rows of line tiles and
  // Ft), or p rows apart (column views), and h0 = (g ^ t) & 1 puts each instruction's 8 lanes
  // on 8 different 16-byte bank groups where reading the same half would conflict 2-way.
  static __device__ __forceinline__ Chunk ld_chunk(const char *p, int h0) {
    if constexpr (kHalf) {
      return *reinterpret_cast<const Chunk *>(p);
    } else {
      const double2 a = *reinterpret_cast<const double2 *>(p + (h0 << 4));
      const double2 b = *reinterpret_cast<const double2 *>(p + ((h0 ^ 1) << 4));
      Chunk c;
      c.v[0] = h0 ? b.x : a.x;
      c.v[1] = h0 ? b.y : a.y;
      c.v[2] = h0 ? a.x : b.x;
      c.v[3] = h0 ? a.y : b.y;
      return c;
    }
  }

  // One warp item of a step (see Nat::compute): m-group mg, column group ns.
  template <bool ROW, class View = ColView>
  static __device__ __forceinline__ void compute(const T *in, const T *Ft, const View &cv,
                                                 int mg, int ns, Acc (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, h0 = (g ^ t) & 1;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = Acc(0);
    // row step: the chunks (in chunk units) of rows g, g + 8 of the two m16 tiles (P = 8: the
    // element offset of k 2t); column step: the item's byte offset
    uint32_t base[4];
    if constexpr (ROW) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int row = mg * 32 + (u >> 1) * 16 + (u & 1) * 8 + g;
        base[u] = P >= 16 ? uint32_t(rc(row, t)) : uint32_t(row * 8 + 2 * t);
      }
    } else {
      base[0] = col_item(cv, mg);
    }
    const char *inb = reinterpret_cast<const char *>(in);
    const char *ftb = reinterpret_cast<const char *>(Ft);
    const int fb = P >= 16 ? rc(8 * ns * WN + g, t) : 0;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      if constexpr (P == 8) {
        // one k8 block: lane t takes k 2t, 2t + 1
        if constexpr (kHalf) {
          uint32_t a[2][2];
          if constexpr (ROW) {
#pragma unroll
            for (int u = 0; u < 4; ++u)
              a[u >> 1][u & 1] = *reinterpret_cast<const uint32_t *>(in + base[u]);
          } else {
            const Chunk v0 = ld_chunk(inb + (base[0] ^ cv.ld(0, 0)), h0);
            const Chunk v1 = ld_chunk(inb + (base[0] ^ cv.ld(0, 1)), h0);
            // rows c 0..3 of the chunk: (g, g + 8) of tile 0, then tile 1; pairs (k 2t, 2t + 1)
            a[0][0] = __byte_perm(v0.w[0], v1.w[0], 0x5410);
            a[0][1] = __byte_perm(v0.w[0], v1.w[0], 0x7632);
            a[1][0] = __byte_perm(v0.w[1], v1.w[1], 0x5410);
            a[1][1] = __byte_perm(v0.w[1], v1.w[1], 0x7632);
          }
#pragma unroll
          for (int j = 0; j < WN; ++j) {
            const uint32_t b = *reinterpret_cast<const uint32_t *>(
                Ft + (8 * (ns * WN + j) + g) * 8 + 2 * t);
#pragma unroll
            for (int i = 0; i < 2; ++i)
              mma_1688<std::is_same<T, __nv_bfloat16>::value>(acc[i][j], a[i][0], a[i][1], b);
          }
        } else {
          double a[2][4];
          if constexpr (ROW) {
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const double2 w = *reinterpret_cast<const double2 *>(in + base[u]);
              // a0 (g, slot t = k 2t), a1 (g + 8, 2t), a2 (g, slot t + 4 = k 2t + 1), a3
              a[u >> 1][(u & 1)] = w.x;
              a[u >> 1][2 + (u & 1)] = w.y;
            }
          } else {
            const Chunk v0 = ld_chunk(inb + (base[0] ^ cv.ld(0, 0)), h0);
            const Chunk v1 = ld_chunk(inb + (base[0] ^ cv.ld(0, 1)), h0);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              a[i][0] = v0.v[2 * i];
              a[i][1] = v0.v[2 * i + 1];
              a[i][2] = v1.v[2 * i];
              a[i][3] = v1.v[2 * i + 1];
            }
          }
#pragma unroll
          for (int j = 0; j < WN; ++j) {
            const double2 b =
                *reinterpret_cast<const double2 *>(Ft + (8 * (ns * WN + j) + g) * 8 + 2 * t);
#pragma unroll
            for (int i = 0; i < 2; ++i) dmma_1688(acc[i][j], a[i], b.x, b.y);
          }
        }
      } else {
        Chunk v[4];
        if constexpr (ROW) {
#pragma unroll
          for (int u = 0; u < 4; ++u)
            v[u] = ld_chunk(inb + ((base[u] ^ uint32_t(kb * 4)) << kLcb), h0);
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) v[u] = ld_chunk(inb + (base[0] ^ cv.ld(kb, u)), h0);
        }
        if constexpr (kHalf) {
          // A [tile]: a0 (g, k 4t, 4t + 1), a1 (g + 8, same k), a2 (g, k 4t + 2, 4t + 3), a3
          uint32_t a[2][4];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if constexpr (ROW) {
              // v[2i] = row g of tile i, v[2i + 1] = row g + 8 (k 4t .. 4t + 3)
              a[i][0] = v[2 * i].w[0];
              a[i][1] = v[2 * i + 1].w[0];
              a[i][2] = v[2 * i].w[1];
              a[i][3] = v[2 * i + 1].w[1];
            } else {
              // v[u] = k 4t + u, rows c: (g, g + 8) of tile 0 in w[0], of tile 1 in w[1]
              a[i][0] = __byte_perm(v[0].w[i], v[1].w[i], 0x5410);
              a[i][1] = __byte_perm(v[0].w[i], v[1].w[i], 0x7632);
              a[i][2] = __byte_perm(v[2].w[i], v[3].w[i], 0x5410);
              a[i][3] = __byte_perm(v[2].w[i], v[3].w[i], 0x7632);
            }
          }
#pragma unroll
          for (int j = 0; j < WN; ++j) {
            const int fo = (fb ^ (kb * 4)) + j * 2 * P;  // (8 rows of P / 4 chunks)
            const Chunk b = ld_chunk(ftb + (uint32_t(fo) << kLcb), h0);
#pragma unroll
            for (int i = 0; i < 2; ++i)
              mma_16816<std::is_same<T, __nv_bfloat16>::value>(acc[i][j], a[i], b.w[0], b.w[1]);
          }
        } else {
          // two k8 halves hf: slots t, t + 4 = k 4t + 2 hf, 4t + 2 hf + 1
          double a[2][2][4];
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
              if constexpr (ROW) {
                a[i][hf][0] = v[2 * i].v[2 * hf];
                a[i][hf][1] = v[2 * i + 1].v[2 * hf];
                a[i][hf][2] = v[2 * i].v[2 * hf + 1];
                a[i][hf][3] = v[2 * i + 1].v[2 * hf + 1];
              } else {
                a[i][hf][0] = v[2 * hf].v[2 * i];
                a[i][hf][1] = v[2 * hf].v[2 * i + 1];
                a[i][hf][2] = v[2 * hf + 1].v[2 * i];
                a[i][hf][3] = v[2 * hf + 1].v[2 * i + 1];
              }
            }
#pragma unroll
          for (int j = 0; j < WN; ++j) {
            const int fo = (fb ^ (kb * 4)) + j * 2 * P;
            const Chunk b = ld_chunk(ftb + (uint32_t(fo) << kLcb), h0);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
              for (int i = 0; i < 2; ++i)
                dmma_1688(acc[i][j], a[i][hf], b.v[2 * hf], b.v[2 * hf + 1]);
          }
        }
      }
    }
  }

  // Two adjacent results -> storage (a pair of elements at d).
  static __device__ __forceinline__ void put2(T *d, Acc a, Acc b) {
    if constexpr (kHalf) {
      *reinterpret_cast<uint32_t *>(d) = E::pack(a, b);
    } else {
      *reinterpret_cast<double2 *>(d) = make_double2(a, b);
    }
  }
  // Four results -> one chunk (float64 in shared memory: the half h0 first, see ld_chunk).
  static __device__ __forceinline__ void put4(char *d, Acc a, Acc b, Acc c, Acc e, int h0 = 0) {
    if constexpr (kHalf) {
      Chunk ch;
      ch.w[0] = E::pack(a, b);
      ch.w[1] = E::pack(c, e);
      *reinterpret_cast<Chunk *>(d) = ch;
    } else {
      const double2 lo = make_double2(a, b), hi = make_double2(c, e);
      *reinterpret_cast<double2 *>(d + (h0 << 4)) = h0 ? hi : lo;
      *reinterpret_cast<double2 *>(d + ((h0 ^ 1) << 4)) = h0 ? lo : hi;
    }
  }
  // Four results -> y (d a chunk of 4 elements: 8 or 32 bytes, aligned), alpha and beta applied.
  static __device__ __forceinline__ void put4_scaled(T *d, const Acc (&r)[4], Acc alpha,
                                                     Acc beta) {
    Acc o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = alpha * r[e];
    if (beta != Acc(0)) {
      const Chunk old = *reinterpret_cast<const Chunk *>(d);
      const T *oe = reinterpret_cast<const T *>(&old);
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] += beta * E::to(oe[e]);
    }
    put4(reinterpret_cast<char *>(d), o[0], o[1], o[2], o[3]);
  }

  // Row step results -> work as [row][q] (the next step's column view), two columns per store.
  static __device__ __forceinline__ void store_rows_smem(T *out, int mg, int ns,
                                                         const Acc (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    char *outb = reinterpret_cast<char *>(out);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int j = 0; j < WN; ++j) {
          const int row = mg * 32 + i * 16 + hr * 8 + g, q = (ns * WN + j) * 8 + 2 * t;
          const uint32_t L = uint32_t(row * (P / 4) + (q >> 2));
          put2(reinterpret_cast<T *>(outb + off(L)) + (q & 3), acc[i][j][2 * hr],
               acc[i][j][2 * hr + 1]);
        }
  }

  // Row step results of a one-step line tile -> y (row = line), alpha and beta applied.
  static __device__ __forceinline__ void store_rows_global(const NatP &p, int64_t l0, int mg,
                                                           int ns, const Acc (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const Acc alpha = Acc(p.alpha_d), beta = Acc(p.beta_d);
    T *y = reinterpret_cast<T *>(p.y);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t line = l0 + mg * 32 + i * 16 + hr * 8 + g;
        if (line >= p.rows) continue;
        T *yr = y + line * p.Bout;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
          T *d = yr + (ns * WN + j) * 8 + 2 * t;
          Acc v0 = alpha * acc[i][j][2 * hr], v1 = alpha * acc[i][j][2 * hr + 1];
          if (beta != Acc(0)) {
            v0 += beta * E::to(d[0]);
            v1 += beta * E::to(d[1]);
          }
          put2(d, v0, v1);
        }
      }
  }

  // Column step results (chunk 8 mg + g of [a][q][c]) -> work in place, or on the last step
  // -> y (see Nat::store_cols).
  static __device__ __forceinline__ void store_cols(const NatP &p, T *out, const ColView &cv,
                                                    int mg, int ns, bool last, int64_t tile,
                                                    const Acc (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    T *yb = nullptr;
    int64_t qstride = 0;
    uint32_t item = 0;
    if (last) {
      T *y = reinterpret_cast<T *>(p.y);
      const int C = 4 << cv.lcq;
      const int ch = mg * 8 + g;
      const int a = ch >> cv.lcq, cc = ch & ((1 << cv.lcq) - 1);
      if (p.line_tile) {
        const int64_t line = tile * p.T + a;
        if (line >= p.rows) return;
        yb = y + line * p.Bout + cc * 4;
        qstride = C;
      } else {
        const int64_t per_row = p.I / p.T;
        const int64_t r = tile / per_row, i0 = (tile - r * per_row) * p.T;
        const int c0 = cc * 4, b = c0 / p.T, i = c0 - b * p.T;
        yb = y + r * p.Bout * p.I + int64_t(b) * p.I + i0 + i;
        qstride = int64_t(C / p.T) * p.I;
      }
    } else {
      item = col_item(cv, mg);
    }
    const Acc alpha = Acc(p.alpha_d), beta = Acc(p.beta_d);
    const int h0 = (g ^ t) & 1;
    char *outb = reinterpret_cast<char *>(out);
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = (ns * WN + j) * 8 + 2 * t + h;
        const Acc r[4] = {acc[0][j][h], acc[0][j][2 + h], acc[1][j][h], acc[1][j][2 + h]};
        if (last)
          put4_scaled(yb + q * qstride, r, alpha, beta);
        else
          put4(outb + (item ^ cv.st_lane[h] ^ cv.st_j[j]), r[0], r[1], r[2], r[3], h0);
      }
  }
};

// Persistent blocks over tiles, the next stages - 1 tiles streaming in meanwhile (the float32
// kernel's loop, kron_tf32_natural_kernel).
template <class T, int P, int WN>
__global__ void __launch_bounds__(natm_max_threads<T>(P), natm_min_blocks<T>(P))
    kron_mma_natural_kernel(const __grid_constant__ NatP p) {
  using K = NatM<T, P, WN>;
  using Acc = typename K::Acc;
  KL_DYNAMIC_SMEM(smem_raw);
  T *Fs = reinterpret_cast<T *>(smem_raw);
  T *const in1 = Fs + p.fs_elems;
  constexpr bool kInPlace = K::NS == 1;
  T *const buf2 = in1 + p.stages * p.buf1_elems;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int64_t t = blockIdx.x;
  if (t >= p.ntiles) return;
  K::load_factors(p, Fs);
  for (int k = 0; k + 1 < p.stages; ++k) {
    if (t + k * gridDim.x < p.ntiles) K::load_tile(p, t + k * gridDim.x, in1 + k * p.buf1_elems);
    cp_async_commit();
  }
  const int mg_total = p.line_tile ? p.T * (p.Bin / P) / 32 : p.Bin / P * p.T / 32;
  const int items = mg_total * K::NS;
  const bool one = p.nsteps == 1;
  for (int it = 0; t < p.ntiles; t += gridDim.x, ++it) {
    T *buf1 = in1 + (it % p.stages) * p.buf1_elems;
    T *work = kInPlace ? buf1 : buf2;
    if (p.stages == 3)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    const int64_t tn = t + int64_t(p.stages - 1) * gridDim.x;
    if (tn < p.ntiles) K::load_tile(p, tn, in1 + ((it + p.stages - 1) % p.stages) * p.buf1_elems);
    cp_async_commit();
    const typename K::ColView cv1 = K::col_view(p.line_tile ? 4 : p.T, 0);
    for (int w = warp; w < items; w += nwarps) {
      const int mg = w / K::NS, ns = w - mg * K::NS;
      Acc acc[2][WN][4];
      const typename K::ColView cv = K::NS == 1 ? cv1 : K::col_view(p.T, ns);
      if (p.line_tile) {
        K::template compute<true>(buf1, Fs, cv, mg, ns, acc);
        __syncwarp();
        if (one)
          K::store_rows_global(p, t * p.T, mg, ns, acc);
        else
          K::store_rows_smem(work, mg, ns, acc);
      } else {
        K::template compute<false>(buf1, Fs, cv, mg, ns, acc);
        __syncwarp();
        K::store_cols(p, work, cv, mg, ns, one, t, acc);
      }
    }
    if (one) continue;
    __syncthreads();
    int C = p.line_tile ? P : P * p.T;
    for (int s = 1; s < p.nsteps; ++s) {
      const bool last = s + 1 == p.nsteps;
      const T *ft = Fs + s * P * P;
      const typename K::ColView cv0 = K::col_view(C, 0);
      for (int w = warp; w < items; w += nwarps) {
        const int mg = w / K::NS, ns = w - mg * K::NS;
        Acc acc[2][WN][4];
        const typename K::ColView cv = K::NS == 1 ? cv0 : K::col_view(C, ns);
        K::template compute<false>(work, ft, cv, mg, ns, acc);
        __syncwarp();
        K::store_cols(p, work, cv, mg, ns, last, t, acc);
      }
      if (!last) __syncthreads();
      C *= P;
    }
  }
}

}  // namespace cu
}  // namespace kl

#endif
