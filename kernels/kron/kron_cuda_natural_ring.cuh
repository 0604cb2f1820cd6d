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

  // This thread's part of loading the slices of one tile: chunks c0, c0 + blockDim.x, ... of
  // each slice, c0 = threadIdx.x (the divisions once a tile, not once a slice).
  struct Loader {
    const float *src;  // chunk c0 of slice 0
    int64_t sstride;   // x elements from a slice to the next
    int64_t cstride;   // x elements from one of the thread's chunks to the next
  };
  static __device__ __forceinline__ Loader loader(const NatP &p, int64_t t) {
    const int slice = p.buf1_elems / P;
    const uint32_t c0 = threadIdx.x;
    Loader L;
    if (p.line_tile) {
      // one line a tile: slice s is its elements [s slice, (s + 1) slice)
      L.src = p.x + t * p.Bin + c0 * 4;
      L.sstride = slice;
      L.cstride = int64_t(blockDim.x) * 4;
    } else {
      // T i of row r; slice s holds the element rows s (slice / T) ..., T / 4 chunks each
      const int64_t per_row = p.I / p.T;
      const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
      const int lcpr = ilog2(p.T) - 2;
      L.src = p.x + r * p.Bin * p.I + i0 + int64_t(c0 >> lcpr) * p.I +
              (c0 & ((1u << lcpr) - 1)) * 4;
      L.sstride = int64_t(slice >> (lcpr + 2)) * p.I;
      L.cstride = int64_t(blockDim.x >> lcpr) * p.I;
    }
    return L;
  }

  // Slice s -> slot (16-byte cp.async pieces), then this thread's arrival on the slot's mbarrier
  // (every thread arrives once a fill).
  static __device__ __forceinline__ void load_slice(const NatP &p, const Loader &L, int s,
                                                    char *slot, uint64_t *bar) {
    const uint32_t nch = uint32_t(p.buf1_elems / P / 4);
    const uint32_t c0 = threadIdx.x;
    const float *src = L.src + s * L.sstride;
    if (p.line_tile) {
      // rows of P in row_chunk order (a slice holds an even number of rows: the parity
      // swizzle is the tile's)
      constexpr uint32_t rowc = P / 4;
      for (uint32_t c = c0; c < nch; c += blockDim.x, src += L.cstride)
        cp_async_16(slot + row_chunk<P>(int(c / rowc), int(c % rowc)) * 16, src, true);
    } else {
      // the tile's chunk s nch + c, swizzled, less the slice's base: c's part XOR s's
      const uint32_t d0 = phys_bytes(c0) ^ swizzle_bytes(uint32_t(s) * nch);
      for (uint32_t c = c0; c < nch; c += blockDim.x, src += L.cstride)
        cp_async_16(slot + (d0 ^ phys_bytes(c - c0)), src, true);
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
  const int64_t ntiles = (p.ntiles - 1 - blockIdx.x) / gridDim.x + 1;  // this block's
  for (int k = threadIdx.x; k < S; k += blockDim.x) mbar_init(&bars[k], blockDim.x);
  K::load_factors(p, Fs);
  __syncthreads();  // the barriers exist before any arrival; the factors are in

  // slices in the block's order: tile it = j / P, slice s = j % P, slot k = j % S
  using R = NatRing<P, WN>;
  int64_t i_it = 0;
  int i_s = 0, i_k = 0;
  typename R::Loader ld = R::loader(p, blockIdx.x);
  const int64_t nslices = ntiles * P;
  int64_t issued = 0;
  auto issue_upto = [&](int64_t upto) {
    for (; issued < upto && issued < nslices; ++issued) {
      R::load_slice(p, ld, i_s, reinterpret_cast<char *>(ring + int64_t(i_k) * slice), &bars[i_k]);
      if (++i_k == S) i_k = 0;
      if (++i_s == P) {
        i_s = 0;
        if (++i_it < ntiles) ld = R::loader(p, blockIdx.x + i_it * gridDim.x);
      }
    }
  };
  issue_upto(S);

  const int ips = slice / (32 * P);  // warp items of one slice in each of the first steps
  const int lane = threadIdx.x & 31, tq = lane & 3;
  int kt = 0;        // tile it's first slot
  uint32_t wt = 0;   // how often the ring has wrapped before it (fill parity)
  for (int64_t it = 0; it < ntiles; ++it) {
    const int64_t t = blockIdx.x + it * gridDim.x;
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
