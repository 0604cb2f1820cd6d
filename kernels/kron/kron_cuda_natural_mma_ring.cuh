// The ring form of the half types' natural-order passes (float16 / bfloat16 on their tensor
// cores, kron_cuda_natural_mma.cuh): the float32 ring kernel's scheme (kron_cuda_natural_ring.cuh,
// which says how the ring, its slots and mbarriers work) on NatM's tile of 8-byte chunks.  It
// gives the half types the float32 grouping of factors into passes where a tile does not fit
// the other kernel:
//  - 3-step P = 32 groups on line tiles (one line of 32^3, 64 KB): 16 x 32^5 in 3 + 2 passes,
//    not 2 + 2 + 1;
//  - 3-step P = 16 groups on column tiles of 16 i (16 x 16^3, 128 KB): 16 x 16^6 in 3 + 3, not
//    3 + 2 + 1;
// and, opt-in (KRONLINALG_KRON_NATURAL_RING_HALF=2), P = 32 column groups on tiles of 64 i
// (128-byte runs of x and y where the other kernel's two buffers hold 16 i, 32-byte runs), the
// float32 ring's 32 i in bytes.
// A slice (tile / P elements) is loaded by one warp in 16-byte copies of two chunks; the chunks
// of a copy stay adjacent under rc and the column views' swizzle (off), which leave bits 0-1 of
// a chunk index alone.
#ifndef KRONLINALG_KRON_CUDA_NATURAL_MMA_RING_CUH
#define KRONLINALG_KRON_CUDA_NATURAL_MMA_RING_CUH

#include "kron_cuda_natural_mma.cuh"

namespace kl {
namespace cu {

// (one block per SM of 16 warps: the half kernel's items take fewer registers than 3xTF32's)
__host__ __device__ constexpr int natm_ring_threads(int) { return 512; }

template <class T, int P>
struct NatMRing {
  using K = NatM<T, P, P / 8>;
  static constexpr int kLcb = K::kLcb;

  // The lane's first copy (8 elements) of tile t's slice 0: line tiles, elements 8 lane of the
  // line; column tiles (T i of row r, T / 8 copies a row, which divides 32), row lane / cpr
  // copy lane % cpr.
  static __device__ __forceinline__ const T *loader(const NatP &p, int64_t t) {
    const uint32_t lane = threadIdx.x & 31;
    const T *x = reinterpret_cast<const T *>(p.x);
    if (p.line_tile) return x + t * p.Bin + lane * 8;
    const int64_t per_row = p.I / p.T;
    const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
    const int lcpr = ilog2(p.T) - 3;
    return x + r * p.Bin * p.I + i0 + int64_t(lane >> lcpr) * p.I +
           (lane & ((1u << lcpr) - 1)) * 8;
  }

  // Slice s -> slot, then the lane's arrival on the slot's mbarrier.
  static __device__ __forceinline__ void load_slice(const NatP &p, const T *src0, int s,
                                                    char *slot, uint64_t *bar) {
    const uint32_t lane = threadIdx.x & 31;
    // (chunks of a slice: a power of two, a multiple of 8 P, slices being whole warp items of
    // 32 P elements; the lane's copies are lane + 32 m, two chunks each)
    const uint32_t nch = uint32_t(p.buf1_elems / P / 4);
    const int nm = int(nch / 64);
    if (p.line_tile) {
      // rows of P in rc order: copy lane + 32 m is row lane / rowc + m 32 / rowc (a multiple of
      // 4 rows, 512 bytes on: rc's XOR of the row's low bits is the lane's)
      const T *src = src0 + s * int64_t(4 * nch);
      constexpr int rowc = P / 8;
      char *dst = slot + (uint32_t(K::rc(int(lane) / rowc, (int(lane) % rowc) * 2)) << kLcb);
      for (int m = 0; m < nm; ++m, src += 256, dst += 512) cp_async_16(dst, src, true);
    } else {
      // copy c of the slice is chunks 2c, 2c + 1 of its [row][T / 4] plane (element row
      // c / cpr): the tile's chunk L = s nch + 2c at off(L), less the slice's base s nch (off is
      // linear over XOR: what is left is 2c's offset and the swizzle bits s nch flips)
      const int lcpr = ilog2(p.T) - 3;
      const T *src = src0 + int64_t(s) * (nch >> (lcpr + 1)) * p.I;
      const int64_t cstride = int64_t(32 >> lcpr) * p.I;
      const uint32_t sb = uint32_t(s) * nch;
      const uint32_t d0 = K::swz(sb);
      for (int m = 0; m < nm; ++m, src += cstride)
        cp_async_16(slot + (d0 ^ K::off(2 * (lane + 32 * uint32_t(m)))), src, true);
    }
    cp_async_mbar_arrive(bar);
  }
};

template <class T, int P>
__global__ void __launch_bounds__(natm_ring_threads(P), 1)
    kron_mma_natural_ring_kernel(const __grid_constant__ NatP p) {
  using K = NatM<T, P, P / 8>;
  using R = NatMRing<T, P>;
  using Acc = typename K::Acc;
  static_assert(K::NS == 1, "the first steps work in place");
  KL_DYNAMIC_SMEM(smem_raw);
  T *const Fs = reinterpret_cast<T *>(smem_raw);
  T *const ring = Fs + p.fs_elems;
  const int S = p.stages;  // slots
  const int slice = p.buf1_elems / P;
  uint64_t *const bars = reinterpret_cast<uint64_t *>(ring + int64_t(S) * slice);
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (blockIdx.x >= p.ntiles) return;
  const int ntiles = int((p.ntiles - 1 - blockIdx.x) / gridDim.x + 1);  // this block's
  for (int k = threadIdx.x; k < S; k += blockDim.x) mbar_init(&bars[k], 32);
  K::load_factors(p, Fs);
  __syncthreads();  // the barriers exist before any arrival; the factors are in

  // slices in the block's order j = it P + s go to slot j mod S; this warp loads slices s =
  // warp, warp + nwarps, ... of every tile: the next is (l_it, l_s) at slot l_k
  int l_it = 0, l_s = warp, l_k = warp;
  const T *ld = R::loader(p, blockIdx.x);
  auto issue_upto = [&](int upto) {  // this warp's slices j < upto
    while (l_s < P && l_it < ntiles && l_it * P + l_s < upto) {
      R::load_slice(p, ld, l_s, reinterpret_cast<char *>(ring + int64_t(l_k) * slice), &bars[l_k]);
      int next = l_s + nwarps;
      if (next >= P) {  // this warp's first slice of the next tile
        next = warp;
        if (++l_it < ntiles) ld = R::loader(p, blockIdx.x + int64_t(l_it) * gridDim.x);
      }
      l_k += next - l_s + (next <= l_s ? P : 0);  // (j advances by less than P <= S)
      if (l_k >= S) l_k -= S;
      l_s = next;
    }
  };
  issue_upto(S);

  const int ips = slice / (32 * P);  // warp items of one slice in each of the first steps
  const int lane = threadIdx.x & 31, tq = lane & 3;
  int kt = 0;       // tile it's first slot
  uint32_t wt = 0;  // how often the ring has wrapped before it (fill parity)
  for (int it = 0; it < ntiles; ++it) {
    const int64_t t = blockIdx.x + int64_t(it) * gridDim.x;
    for (int s = warp; s < P; s += nwarps) {
      int k = kt + s;
      uint32_t fill = wt;
      if (k >= S) k -= S, ++fill;
      mbar_wait_parity(&bars[k], fill & 1);
      T *const base = ring + int64_t(k - s) * slice;  // the tile's layout, slice s at slot k
      int C = p.line_tile ? 1 : p.T;
      for (int st = 0; st + 1 < p.nsteps; ++st) {
        const T *ft = Fs + st * P * P;
        const bool row = st == 0 && p.line_tile;
        if (st > 0) C *= P;
        const typename K::ColView cv = K::col_view(row ? 4 : C, 0);
        for (int mg = s * ips; mg < (s + 1) * ips; ++mg) {
          Acc acc[2][P / 8][4];
          if (row) {
            K::template compute<true>(base, ft, cv, mg, 0, acc);
            __syncwarp();  // every lane has read its rows before any writes over them
            K::store_rows_smem(base, mg, 0, acc);
          } else {
            K::template compute<false>(base, ft, cv, mg, 0, acc);
            __syncwarp();
            K::store_cols(p, base, cv, mg, 0, false, t, acc);
          }
        }
        __syncwarp();  // this step's results are in before the next step reads them
      }
    }
    __syncthreads();  // every slice has been through the first steps
    {
      // the last step: [p][c] with c over a slice; row p's part of every address is its slot
      // (and the swizzle bits p contributes)
      typename K::TableView cv;
      static_cast<typename K::ColView &>(cv) = K::col_view(slice, 0);
#pragma unroll
      for (int kb = 0; kb < K::KB; ++kb)
#pragma unroll
        for (int u = 0; u < 2 * K::KH; ++u) {
          const uint32_t pr = uint32_t(16 * kb + 2 * K::KH * tq + u);
          int k = kt + int(pr);
          if (k >= S) k -= S;
          cv.tab[kb][u] = (uint32_t(k) * uint32_t(slice) * uint32_t(sizeof(T))) ^
                          K::swz(pr << cv.lcq);
        }
      const T *ft = Fs + (p.nsteps - 1) * P * P;
      for (int mg = warp; mg < P * ips; mg += nwarps) {
        Acc acc[2][P / 8][4];
        K::template compute<false>(ring, ft, cv, mg, 0, acc);
        K::store_cols(p, nullptr, cv, mg, 0, true, t, acc);
      }
    }
    __syncthreads();  // every slot of this tile has been read: the next slices may land there
    kt += P;
    if (kt >= S) kt -= S, ++wt;
    issue_upto((it + 1) * P + S);
  }
}

}  // namespace cu
}  // namespace kl

#endif
