// float32 3xTF32 natural-order passes whose tile does not fit two load buffers: a 3-step P = 32
// group on line tiles (one line of 32^3, 128 KB) or a 3-step P = 16 group on column tiles of
// 8 i (8 x 16^3, 128 KB) - 16 x 32^5 in 3 + 2 steps and 16 x 16^6 in 3 + 3 instead of three
// passes each.
//
// Every step but the last contracts a mode inside one slice of the tile (one value of the
// group's first mode: tile / P elements), so the tile streams in slice by slice through a ring
// of S >= P slice slots, an mbarrier each (armed by the threads' cp.async arrivals): a warp takes
// each slice as it lands and runs the first steps on it in place, while the rest of the tile and
// the first S - P slices of the block's next tile are still loading; the last step then reads all
// P slices (row p of its [p][c] view is slice p's slot) and writes y.  The tile keeps the other
// natural-order kernel's logical layout and swizzle (kron_cuda_natural.cuh); only where a slice
// lies moves: the block's j-th slice goes to slot j mod S.
#ifndef KRONLINALG_KRON_CUDA_NATURAL_RING_CUH
#define KRONLINALG_KRON_CUDA_NATURAL_RING_CUH

#include "kron_cuda_natural.cuh"

namespace kl {
namespace cu {

// (one block per SM: P = 16 fits 128 registers, so 16 warps; P = 32 fits 168 with no spills,
// so 12: on the H100 16 x 32^5 took 4.80-4.84 ms against 4.87-4.88 with 8 warps, one call)
__host__ __device__ constexpr int nat_ring_threads(int P) { return P == 16 ? 512 : 384; }

template <int P, int WN>
struct NatRing {
  using K = Nat<P, WN>;

  // Loading: one warp loads a whole slice (lane l takes chunks l, l + 32, ...), slice s of every
  // tile by warp s mod nwarps, so a slice's addresses and barrier arrival are worked out once,
  // not by every warp.  (Every thread taking a share of every slice spent a third of the ring
  // kernel's instructions on the loads: 16 x 16^6 on the H100, Nsight Compute.)
  // The lane's chunk 0 of tile t's slice 0 (the divisions once a tile; the strides, worked out
  // per slice from the parameters, keep no registers across the tile loop).
  static __device__ __forceinline__ const float *loader(const NatP &p, int64_t t) {
    const uint32_t lane = threadIdx.x & 31;
    // line tiles (one line a tile): slice s is its elements [s slice, (s + 1) slice), chunk c
    // at 4 c; column tiles (T i of row r): chunk c of the tile is element row c / cpr (cpr = T / 4
    // chunks a row, which divides 32), chunk c % cpr of it
    if (p.line_tile) return p.x + t * p.Bin + lane * 4;
    const int64_t per_row = p.I / p.T;
    const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
    const int lcpr = ilog2(p.T) - 2;
    return p.x + r * p.Bin * p.I + i0 + int64_t(lane >> lcpr) * p.I +
           (lane & ((1u << lcpr) - 1)) * 4;
  }

  // Slice s -> slot (16-byte cp.async pieces), then the lane's arrival on the slot's mbarrier
  // (the 32 lanes of one warp arrive once a fill).
  static __device__ __forceinline__ void load_slice(const NatP &p, const float *src0, int s,
                                                    char *slot, uint64_t *bar) {
    const uint32_t lane = threadIdx.x & 31;
    // (a power of two and a multiple of 8 P, the planner's slices being whole warp items of
    // 32 P elements: so nm is a multiple of 4)
    const uint32_t nch = uint32_t(p.buf1_elems / P / 4);
    const int nm = int(nch / 32);  // the lane's chunks lane + 32 m
    if (p.line_tile) {
      const float *src = src0 + s * int64_t(4 * nch);
      // rows of P in row_chunk order: chunk lane + 32 m is row lane / rowc + m 32 / rowc, an
      // even step, so the row's parity (the swizzle) is the lane's
      constexpr int rowc = P / 4;
      char *dst = slot + row_chunk<P>(int(lane) / rowc, int(lane) % rowc) * 16;
      for (int m = 0; m < nm; ++m, src += 128, dst += 512) cp_async_16(dst, src, true);
    } else {
      const int lcpr = ilog2(p.T) - 2;
      const float *src = src0 + int64_t(s) * (nch >> lcpr) * p.I;
      const int64_t cstride = int64_t(32 >> lcpr) * p.I;
      // the tile's chunk s nch + lane + 32 m, swizzled, less the slice's base: s's part XOR
      // lane's XOR m's, with phys_bytes(32 m) = m << 9 ^ fold2(m) << 5 and, for m = 4 a + b,
      // fold2(m) = fold2(a) ^ b
      const uint32_t d0 = phys_bytes(lane) ^ swizzle_bytes(uint32_t(s) * nch);
      for (int a = 0; a < nm / 4; ++a) {
        const uint32_t da = d0 ^ (uint32_t(a) << 11) ^ (fold2(uint32_t(a)) << 5);
#pragma unroll
        for (uint32_t b = 0; b < 4; ++b, src += cstride)
          cp_async_16(slot + (da ^ (b << 9) ^ (b << 5)), src, true);
      }
    }
    cp_async_mbar_arrive(bar);
  }
};

template <int P, int WN>
__global__ void __launch_bounds__(nat_ring_threads(P), 1)
    kron_tf32_natural_ring_kernel(const __grid_constant__ NatP p) {
  using K = Nat<P, WN>;
  static_assert(K::NS == 1, "the first steps work in place");
  KL_DYNAMIC_SMEM(smem_raw);
  float *const Fs = reinterpret_cast<float *>(smem_raw);
  float *const ring = Fs + p.fs_elems;
  const int S = p.stages;  // slots
  const int slice = p.buf1_elems / P;
  uint64_t *const bars = reinterpret_cast<uint64_t *>(ring + int64_t(S) * slice);
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (blockIdx.x >= p.ntiles) return;
  const int ntiles = int((p.ntiles - 1 - blockIdx.x) / gridDim.x + 1);  // this block's
  for (int k = threadIdx.x; k < S; k += blockDim.x) mbar_init(&bars[k], 32);
  K::load_factors(p, Fs);
  __syncthreads();  // the barriers exist before any arrival; the factors are in

  // slices in the block's order j = it P + s (tile it, slice s) go to slot j mod S; this warp
  // loads slices s = warp, warp + nwarps, ... of every tile: the next is (l_it, l_s) at l_k
  using R = NatRing<P, WN>;
  int l_it = 0, l_s = warp, l_k = warp;
  const float *ld = R::loader(p, blockIdx.x);
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
  int kt = 0;        // tile it's first slot
  uint32_t wt = 0;   // how often the ring has wrapped before it (fill parity)
  for (int it = 0; it < ntiles; ++it) {
    const int64_t t = blockIdx.x + int64_t(it) * gridDim.x;
    const typename K::TileOut to = K::tile_out(p, t);
    for (int s = warp; s < P; s += nwarps) {
      int k = kt + s;
      uint32_t fill = wt;
      if (k >= S) k -= S, ++fill;
      mbar_wait_parity(&bars[k], fill & 1);
      float *const base = ring + int64_t(k - s) * slice;  // the tile's layout, slice s at slot k
      // column steps' row length: column tiles T, T P, ...; line tiles (a row step first) P, ...
      int C = p.line_tile ? 1 : p.T;
      for (int st = 0; st + 1 < p.nsteps; ++st) {
        const float *fh = Fs + st * 2 * P * P;
        const bool row = st == 0 && p.line_tile;
        if (st > 0) C *= P;
        const typename K::ColView cv = K::col_view(row ? 4 : C, 0);
        for (int mg = s * ips; mg < (s + 1) * ips; ++mg) {
          float acc[2][WN][4];
          if (row) {
            K::template compute<true>(base, fh, fh + P * P, cv, mg, 0, acc);
            __syncwarp();  // every lane has read its rows before any writes over them
            K::store_rows_smem(base, mg, 0, acc);
          } else {
            K::template compute<false>(base, fh, fh + P * P, cv, mg, 0, acc);
            __syncwarp();
            K::store_cols(p, base, cv, mg, 0, false, to, acc);
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
          cv.tab[kb][u] = (uint32_t(k) * uint32_t(slice) * 4u) ^ swizzle_bytes(pr << cv.lcq);
        }
      const float *fh = Fs + (p.nsteps - 1) * 2 * P * P;
      for (int mg = warp; mg < P * ips; mg += nwarps) {
        float acc[2][WN][4];
        K::template compute<false>(ring, fh, fh + P * P, cv, mg, 0, acc);
        K::store_cols(p, nullptr, cv, mg, 0, true, to, acc);
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
