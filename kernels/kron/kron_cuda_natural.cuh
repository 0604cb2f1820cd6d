// float32 3xTF32 fused passes for the natural layout (x and y with contiguous rows, x @ kron):
// the data path of the tile is the tensor's own order, so nothing is transposed or staged.
//
// A pass contracts a group of n <= kNatMaxSteps consecutive factors, all P x P (P = 8, 16, 32,
// 64).  Its tile is either T whole lines (I == 1: the last factors, lines are contiguous rows of
// Bin elements) or, for the other passes (I > 1: element p of line (r, i) at r*Bin*I + p*I + i),
// T consecutive i of one row r.  Either way the tile is a row-major tensor, and every step
// contracts one of its modes:
//  - "row" step (the first step of a line tile): rows of P contiguous k, A = the rows as they
//    lie.  Results go to [row][q] (the next step's layout).
//  - "column" step (every other step): the tile read as [a][p][c] with c contiguous (C >= 8
//    elements), A = the column blocks: a lane's 16-byte chunk holds 4 consecutive c, which it
//    uses as rows of two m16 tiles (the row order of an mma is free; undone on the way out).
//    Results [a][q][c] go back in the same layout, or on the last step straight to y in
//    16-byte stores.
// Where one warp item holds all Q columns (P <= 32) every step works in place, in the tile's
// own buffer (each warp owns whole chunks over every p and q, P == Q); P = 64 takes its columns
// in two items, so step 1 writes to a second buffer (buf2) and its groups have at most two steps.
// The k order inside each 16-wide k block is permuted the same way for A and B (lane t takes
// k = 4t .. 4t + 3: one 16-byte load of A per row and of the factor's transpose Ft[q][p]), so
// every shared-memory access is a 16-byte (or 8-byte, P = 8) one.
//
// Bank conflicts: column views swizzle 16-byte chunks by XORing bits 1-2 of the chunk index with
// a 2-bit fold of the index above bit 3 (phys_chunk_nat), which keeps the reads (4 rows p four
// apart x 2 chunks per quarter-warp) and the writes (rows q two apart) conflict-free for any
// power-of-two row length C >= 8; line tiles and Ft XOR bit 2 of the chunk by the row's parity
// (row_chunk).  Tiles stream into p.stages buffers (cp.async): the next ones load while this one
// is computed.
#ifndef KRONLINALG_KRON_CUDA_NATURAL_CUH
#define KRONLINALG_KRON_CUDA_NATURAL_CUH

#include <type_traits>

#include "kron_cuda_common.cuh"
#include "kron_cuda_kernels.cuh"  // NatP
#include "kron_cuda_natural_layout.cuh"
#include "kron_cuda_tc.cuh"      // store_chunk_scaled
#include "kron_cuda_tf32.cuh"    // split_tf32_int

namespace kl {
namespace cu {

// P x P factors; WN n8 tiles per warp item (a step's Q columns in P / 8 / WN column groups;
// in-place steps need all of them in one item).
template <int P, int WN>
struct Nat {
  static constexpr int KB = P >= 16 ? P / 16 : 1;  // k16 blocks (P = 8: one k8 block)
  static constexpr int KH = P >= 16 ? 2 : 1;       // k8 halves per block
  static constexpr int NS = P / 8 / WN;  // column groups
  static constexpr int LP = log2_pow2(P);

  // A column view [a][p][c] of a step (C = c's length, a power of two >= 4): chunk cc of row p
  // of block a is L = (a P + p) cq + cc with cq = C / 4, i.e. the fields a, p and cc in disjoint
  // bits, so its offset is the XOR of an item's part (a, cc: col_item) and a row's part, itself
  // the XOR of parts computed once a step: A's rows 16 kb + 2 KH t + u and the result rows
  // q = 8 (ns WN + j) + 2t + h, a lane's and the parts every lane shares.  (Per access a 3-input
  // XOR, where it was a multiply, a fold and an XOR; per item the division by cq is a shift.)
  struct ColView {
    int lcq;                 // log2(cq)
    uint32_t ld_lane;        // A's rows 2 KH t
    uint32_t ld_u[2 * KH];   // A's rows u (the same in every lane)
    uint32_t ld_kb[KB];      // A's rows 16 kb (likewise)
    uint32_t st_lane[2];     // result rows 2t + h
    uint32_t st_j[WN];       // result rows 8 (ns WN + j) (the same in every lane)
    __device__ __forceinline__ uint32_t ld(int kb, int u) const {
      return ld_lane ^ ld_u[u] ^ ld_kb[kb];
    }
  };
  static __device__ __forceinline__ ColView col_view(int C, int ns) {
    const int t = threadIdx.x & 3;
    ColView v;
    v.lcq = ilog2(C) - 2;
    v.ld_lane = phys_bytes(uint32_t(2 * KH * t) << v.lcq);
#pragma unroll
    for (int u = 0; u < 2 * KH; ++u) v.ld_u[u] = phys_bytes(uint32_t(u) << v.lcq);
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) v.ld_kb[kb] = phys_bytes(uint32_t(16 * kb) << v.lcq);
#pragma unroll
    for (int h = 0; h < 2; ++h) v.st_lane[h] = phys_bytes(uint32_t(2 * t + h) << v.lcq);
#pragma unroll
    for (int j = 0; j < WN; ++j) v.st_j[j] = phys_bytes(uint32_t(8 * (ns * WN + j)) << v.lcq);
    return v;
  }
  // The same view with a table of A's row parts, one per (kb, u): the ring kernel's last step
  // puts each row's slot there (kron_cuda_natural_ring.cuh).
  struct TableView : ColView {
    uint32_t tab[KB][2 * KH];
    __device__ __forceinline__ uint32_t ld(int kb, int u) const { return tab[kb][u]; }
  };
  // The item's part: chunk 8 mg + g of the [a][c] plane.
  static __device__ __forceinline__ uint32_t col_item(const ColView &v, int mg) {
    const uint32_t ch = uint32_t(mg * 8 + ((threadIdx.x & 31) >> 2));
    const uint32_t a = ch >> v.lcq, cc = ch & ((1u << v.lcq) - 1);
    return phys_bytes((a << (v.lcq + LP)) | cc);
  }

  // Factors -> Ft_hi[q][p], Ft_lo[q][p] (P x P each, row_chunk order) per step.
  static __device__ void load_factors(const NatP &p, float *Fs) {
    for (int s = 0; s < p.nsteps; ++s) {
      const float *F = p.F[s];
      float *hi = Fs + s * 2 * P * P, *lo = hi + P * P;
      for (int i = threadIdx.x; i < P * P; i += blockDim.x) {
        const int q = i / P, k = i - q * P;
        uint32_t h, l;
        split_tf32_int(__float_as_uint(F[k * p.frs[s] + q * p.fcs[s]]), h, l);
        const int o = row_chunk<P>(q, k >> 2) * 4 + (k & 3);
        hi[o] = __uint_as_float(h);
        lo[o] = __uint_as_float(l);
      }
    }
  }

  // Tile t's elements -> buf1 (cp.async, 16-byte pieces).  Lines past the matrix are zeros.
  static __device__ void load_tile(const NatP &p, int64_t t, float *buf1) {
    if (p.line_tile) {
      const int64_t l0 = t * p.T;
      const int64_t nvalid = (p.rows - l0 < p.T ? p.rows - l0 : p.T) * p.Bin;
      const int nch = p.T * p.Bin / 4, nvalid_ch = int(nvalid / 4);
      // (a thread's chunks c0 + k blockDim.x step over an even number of rows of P, so their
      // row_chunk is c0's plus k blockDim.x: per chunk two adds, where the division and the
      // swizzle worked out per chunk took ~23 instructions, Nsight Compute)
      constexpr int rowc = P / 4;  // chunks per row of P
      const int c0 = threadIdx.x;
      const float *src = p.x + l0 * p.Bin + c0 * 4;
      float *dst = buf1 + row_chunk<P>(c0 / rowc, c0 % rowc) * 4;
      const int step = blockDim.x;
      for (int c = c0; c < nch; c += step, src += 4 * step, dst += 4 * step) {
        const bool ok = c < nvalid_ch;
        cp_async_16(dst, ok ? src : p.x, ok);
      }
    } else {
      const int64_t per_row = p.I / p.T;
      const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
      if constexpr (P == 32) {
        // (H100, one call: 1024 x 32^4 7.50 ms with this loop, 8.95 with the one below, which
        // takes 1024 x 16^5 from 7.19 to 6.87 ms)
        const float *src = p.x + r * p.Bin * p.I + i0;
        const int cpr = p.T / 4;
        const int nch = p.Bin * cpr;
        for (int c = threadIdx.x; c < nch; c += blockDim.x) {
          const int rho = c / cpr, cc = c - rho * cpr;
          cp_async_16(buf1 + phys_chunk_nat(uint32_t(c)) * 4, src + int64_t(rho) * p.I + cc * 4,
                      true);
        }
      } else {
        // (chunks per element row (a, p): cpr = T / 4, a power of two that divides blockDim.x,
        // so a thread's chunks keep their column and step over blockDim.x / cpr rows)
        const int lcpr = ilog2(p.T) - 2;
        const int nch = p.Bin << lcpr;
        const uint32_t c0 = threadIdx.x;
        const float *src = p.x + r * p.Bin * p.I + i0 + int64_t(c0 >> lcpr) * p.I +
                           (c0 & ((1u << lcpr) - 1)) * 4;
        const int64_t step = int64_t(blockDim.x >> lcpr) * p.I;
        const uint32_t d0 = phys_bytes(c0);
        char *dst = reinterpret_cast<char *>(buf1);
        for (uint32_t c = c0; c < uint32_t(nch); c += blockDim.x, src += step)
          cp_async_16(dst + (d0 ^ phys_bytes(c - c0)), src, true);
      }
    }
  }

  static __device__ __forceinline__ void split4(const float4 &v, uint32_t (&h)[4],
                                                uint32_t (&l)[4]) {
    split_tf32_int(__float_as_uint(v.x), h[0], l[0]);
    split_tf32_int(__float_as_uint(v.y), h[1], l[1]);
    split_tf32_int(__float_as_uint(v.z), h[2], l[2]);
    split_tf32_int(__float_as_uint(v.w), h[3], l[3]);
  }

  // One warp item of a step: m-group mg (32 rows of the step's A), all Q columns.
  //  row step: A rows r = 32 mg + 16 i + g (+8), k contiguous in buf1.
  //  column step: chunk 8 mg + g of the [a][c] plane at every p.
  template <bool ROW, class View = ColView>
  static __device__ __forceinline__ void compute(const float *in, const float *Ft_hi,
                                                 const float *Ft_lo, const View &cv, int mg,
                                                 int ns, float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
    // per-lane base offsets of the 4 A loads of a k16 block (row step: rows g, g+8 of the two
    // m16 tiles, in chunks; column step: rows p = 4t + u of chunk g, in bytes and without u's
    // part)
    uint32_t base[4];
    if constexpr (ROW) {
      // (P = 8: rows of two chunks, lane t reads floats 2t, 2t + 1: offsets in floats)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int row = mg * 32 + (u >> 1) * 16 + (u & 1) * 8 + g;
        base[u] = P >= 16 ? uint32_t(row_chunk<P>(row, t)) : uint32_t(row * 8 + 2 * t);
      }
    } else {
      base[0] = col_item(cv, mg);
    }
    const char *inb = reinterpret_cast<const char *>(in);
    // Ft rows n = 8 (ns WN + j) + g: chunk kb * 4 + t of row_chunk order (the parity of n is
    // that of g)
    const int fb = P >= 16 ? row_chunk<P>(8 * ns * WN + g, t) : g * 2;  // (P = 8: g * 8 + 2t floats)
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      float4 v[4];
      if constexpr (ROW && P == 8) {
        // rows of 8 k: floats 2t, 2t + 1
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float2 w = *reinterpret_cast<const float2 *>(in + base[u]);
          v[u] = make_float4(w.x, w.y, 0.f, 0.f);
        }
      } else if constexpr (ROW) {
        // rows of P contiguous k: chunk kb*4 + t (bit 2 XORed by the row's parity)
#pragma unroll
        for (int u = 0; u < 4; ++u)
          v[u] = *reinterpret_cast<const float4 *>(in + (base[u] ^ uint32_t(kb * 4)) * 4);
      } else if constexpr (P == 8) {
#pragma unroll
        for (int u = 0; u < 2; ++u)
          v[u] = *reinterpret_cast<const float4 *>(inb + (base[0] ^ cv.ld(0, u)));
        v[2] = v[3] = make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u)
          v[u] = *reinterpret_cast<const float4 *>(inb + (base[0] ^ cv.ld(kb, u)));
      }
      uint32_t h[4][4], l[4][4];
#pragma unroll
      for (int u = 0; u < 4; ++u) split4(v[u], h[u], l[u]);
      // A fragments [tile][k8 half]: a0 (row g, k slot t), a1 (g + 8, t), a2 (g, t + 4),
      // a3 (g + 8, t + 4); k slots (t, t + 4) = k (4t, 4t + 1) in half 0, (4t + 2, 4t + 3) in 1
      uint32_t ah[2][2][4], al[2][2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int hf = 0; hf < KH; ++hf) {
          if constexpr (ROW) {
            // v[2i] = row g of tile i (k 4t..4t+3), v[2i+1] = row g + 8
            ah[i][hf][0] = h[2 * i][2 * hf];
            ah[i][hf][1] = h[2 * i + 1][2 * hf];
            ah[i][hf][2] = h[2 * i][2 * hf + 1];
            ah[i][hf][3] = h[2 * i + 1][2 * hf + 1];
            al[i][hf][0] = l[2 * i][2 * hf];
            al[i][hf][1] = l[2 * i + 1][2 * hf];
            al[i][hf][2] = l[2 * i][2 * hf + 1];
            al[i][hf][3] = l[2 * i + 1][2 * hf + 1];
          } else {
            // v[u] = chunk g at k = 4t + u: c0..c3 = rows (g, g + 8) of tile 0, then tile 1
            ah[i][hf][0] = h[2 * hf][2 * i];
            ah[i][hf][1] = h[2 * hf][2 * i + 1];
            ah[i][hf][2] = h[2 * hf + 1][2 * i];
            ah[i][hf][3] = h[2 * hf + 1][2 * i + 1];
            al[i][hf][0] = l[2 * hf][2 * i];
            al[i][hf][1] = l[2 * hf][2 * i + 1];
            al[i][hf][2] = l[2 * hf + 1][2 * i];
            al[i][hf][3] = l[2 * hf + 1][2 * i + 1];
          }
        }
#pragma unroll
      for (int j = 0; j < WN; ++j) {
        float4 bh, bl;
        if constexpr (P == 8) {
          const float2 wh = *reinterpret_cast<const float2 *>(Ft_hi + fb * 4 + 2 * t);
          const float2 wl = *reinterpret_cast<const float2 *>(Ft_lo + fb * 4 + 2 * t);
          bh = make_float4(wh.x, wh.y, 0.f, 0.f);
          bl = make_float4(wl.x, wl.y, 0.f, 0.f);
        } else {
          const int fo = ((fb ^ (kb * 4)) + j * 2 * P) * 4;  // (8 rows of P / 4 chunks)
          bh = *reinterpret_cast<const float4 *>(Ft_hi + fo);
          bl = *reinterpret_cast<const float4 *>(Ft_lo + fo);
        }
        const uint32_t bhu[4] = {__float_as_uint(bh.x), __float_as_uint(bh.y),
                                 __float_as_uint(bh.z), __float_as_uint(bh.w)};
        const uint32_t blu[4] = {__float_as_uint(bl.x), __float_as_uint(bl.y),
                                 __float_as_uint(bl.z), __float_as_uint(bl.w)};
#pragma unroll
        for (int hf = 0; hf < KH; ++hf)
#pragma unroll
          for (int i = 0; i < 2; ++i) {  // small terms first
            mma_tf32(acc[i][j], al[i][hf], bhu[2 * hf], bhu[2 * hf + 1]);
            mma_tf32(acc[i][j], ah[i][hf], blu[2 * hf], blu[2 * hf + 1]);
            mma_tf32(acc[i][j], ah[i][hf], bhu[2 * hf], bhu[2 * hf + 1]);
          }
      }
    }
  }

  // Row step results -> buf2 as [row][q] (swizzled), two columns per store.  Chunk L = row P/4
  // + q/4 with row = 32 mg + 16 i + 8 hr + g and q/4 = 2 (ns WN + j) + t/2, fields in disjoint
  // bits: its offset is the XOR of the item's part, the lane's and constants.
  static __device__ __forceinline__ void store_rows_smem(float *out, int mg, int ns,
                                                         const float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t base = phys_bytes(uint32_t(mg) << (LP + 3)) ^
                          phys_bytes((uint32_t(g) << (LP - 2)) | uint32_t(t >> 1)) |
                          uint32_t(t & 1) << 3;  // (q % 4 = 2 (t % 2): floats within the chunk)
    char *outb = reinterpret_cast<char *>(out);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int j = 0; j < WN; ++j) {
          const float2 v = make_float2(acc[i][j][2 * hr], acc[i][j][2 * hr + 1]);
          if constexpr (P == 32) {
            // (the swizzle worked out per store: the XOR form made 16 x 32^5 2-3 % slower on
            // the H100, one call, and 1024 x 16^5 and 16 x 16^6 3-5 % faster)
            const int row = mg * 32 + i * 16 + hr * 8 + g, q = (ns * WN + j) * 8 + 2 * t;
            const uint32_t L = uint32_t(row * (P / 4) + (q >> 2));
            *reinterpret_cast<float2 *>(out + phys_chunk_nat(L) * 4 + (q & 3)) = v;
          } else {
            const uint32_t off = base ^ phys_bytes(uint32_t(i * 16 + hr * 8) << (LP - 2)) ^
                                 phys_bytes(uint32_t(2 * (ns * WN + j)));
            *reinterpret_cast<float2 *>(outb + off) = v;
          }
        }
  }

  // Row step results of a one-step line tile -> y (row = line), alpha and beta applied.
  static __device__ __forceinline__ void store_rows_global(const NatP &p, int64_t l0, int mg,
                                                           int ns, const float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t line = l0 + mg * 32 + i * 16 + hr * 8 + g;
        if (line >= p.rows) continue;
        float *yr = p.y + line * p.Bout;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
          float2 v = make_float2(p.alpha * acc[i][j][2 * hr], p.alpha * acc[i][j][2 * hr + 1]);
          float2 *d = reinterpret_cast<float2 *>(yr + (ns * WN + j) * 8 + 2 * t);
          if (p.beta != 0.f) {
            const float2 o = *d;
            v.x += p.beta * o.x;
            v.y += p.beta * o.y;
          }
          *d = v;
        }
      }
  }

  // Where a tile's last step writes in y: element (a, q, c) of a line tile at
  // y + a Bout + q C + c; element (q, c) of a column tile, c = (b, i) with b = c / T, i = c % T,
  // at y + (q (C / T) + b) I + i.
  struct TileOut {
    float *y;   // the tile's element 0
    int lines;  // line tiles: lines of the tile inside the matrix (at most T)
  };
  static __device__ __forceinline__ TileOut tile_out(const NatP &p, int64_t t) {
    TileOut o;
    if (p.line_tile) {
      o.y = p.y + t * p.T * p.Bout;
      const int64_t left = p.rows - t * p.T;
      o.lines = int(left < p.T ? left : p.T);
    } else {
      const int64_t per_row = p.I / p.T;
      const int64_t r = t / per_row, i0 = (t - r * per_row) * p.T;
      o.y = p.y + r * p.Bout * p.I + i0;
      o.lines = 0;
    }
    return o;
  }

  // Column step results (chunk 8 mg + g of [a][q][c], 4 consecutive c per column q) -> buf2 in
  // place, or on the last step -> y: `where` is the tile's index (its place in y worked out per
  // item, as the natural-order kernel does: keeping a TileOut live through its items slowed
  // P = 32 and 8 on the H100) or its TileOut (the ring kernel: once a tile).
  template <class Where>
  static __device__ __forceinline__ void store_cols(const NatP &p, float *out, const ColView &cv,
                                                    int mg, int ns, bool last, const Where &where,
                                                    const float (&acc)[2][WN][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float *yb = nullptr;
    int64_t qstride = 0;
    uint32_t item = 0;
    if (last) {
      const int C = 4 << cv.lcq;
      const int ch = mg * 8 + g;
      const int a = ch >> cv.lcq, cc = ch & ((1 << cv.lcq) - 1);
      if constexpr (std::is_same<Where, TileOut>::value) {
        if (p.line_tile) {
          if (a >= where.lines) return;
          yb = where.y + a * int64_t(p.Bout) + cc * 4;
          qstride = C;
        } else {
          const int lT = ilog2(p.T);
          const int c0 = cc * 4, b = c0 >> lT, i = c0 & ((1 << lT) - 1);
          yb = where.y + int64_t(b) * p.I + i;
          qstride = int64_t(C >> lT) * p.I;
        }
      } else if (p.line_tile) {
        const int64_t line = where * p.T + a;
        if (line >= p.rows) return;
        yb = p.y + line * p.Bout + cc * 4;  // element (q, c) at q * C + c
        qstride = C;
      } else {
        // c = (b, i): b = c / TI, i = c % TI; element (q, b, i) at (q * (C / TI) + b) * I + i
        const int64_t per_row = p.I / p.T;
        const int64_t r = where / per_row, i0 = (where - r * per_row) * p.T;
        const int c0 = cc * 4, b = c0 / p.T, i = c0 - b * p.T;
        yb = p.y + r * p.Bout * p.I + int64_t(b) * p.I + i0 + i;
        qstride = int64_t(C / p.T) * p.I;
      }
    } else {
      item = col_item(cv, mg);
    }
    char *outb = reinterpret_cast<char *>(out);
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = (ns * WN + j) * 8 + 2 * t + h;
        float4 v = make_float4(acc[0][j][h], acc[0][j][2 + h], acc[1][j][h], acc[1][j][2 + h]);
        if (last) {
          store_chunk_scaled<float>(yb + q * qstride, reinterpret_cast<const float *>(&v),
                                    p.alpha, p.beta);
        } else {
          *reinterpret_cast<float4 *>(outb + (item ^ cv.st_lane[h] ^ cv.st_j[j])) = v;
        }
      }
  }
};

// Persistent blocks over tiles; the next stages - 1 tiles stream into the other copies of buf1
// while this one is computed.
// Blocks of up to nat_max_threads(P) threads (P = 16: 8 warps, otherwise 4), three per SM by
// registers (up to 170 for 4 warps, where 128 spilled for P = 32; P = 16 takes 78, and its
// 1024 x 16^5 went from 7.6-8.1 to 7.4 ms on the H100 with the third block)
__host__ __device__ constexpr int nat_max_threads(int P) { return P == 16 ? 256 : 128; }
__host__ __device__ constexpr int nat_min_blocks(int) { return 3; }

template <int P, int WN>
__global__ void __launch_bounds__(nat_max_threads(P), nat_min_blocks(P))
    kron_tf32_natural_kernel(const __grid_constant__ NatP p) {
  using K = Nat<P, WN>;
  KL_DYNAMIC_SMEM(smem_raw);
  float *Fs = reinterpret_cast<float *>(smem_raw);
  float *const in1 = Fs + p.fs_elems;  // p.stages copies of buf1_elems
  // (one column group: step 1 writes over its own input, later steps work there too)
  constexpr bool kInPlace = K::NS == 1;
  float *const buf2 = in1 + p.stages * p.buf1_elems;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int64_t t = blockIdx.x;
  if (t >= p.ntiles) return;
  K::load_factors(p, Fs);
  for (int k = 0; k + 1 < p.stages; ++k) {
    if (t + k * gridDim.x < p.ntiles) K::load_tile(p, t + k * gridDim.x, in1 + k * p.buf1_elems);
    cp_async_commit();
  }
  // warp items of every step: m-groups (32 rows of the step's A) x column groups
  const int mg_total = p.line_tile ? p.T * (p.Bin / P) / 32 : p.Bin / P * p.T / 32;
  const int items = mg_total * K::NS;
  const bool one = p.nsteps == 1;
  for (int it = 0; t < p.ntiles; t += gridDim.x, ++it) {
    float *buf1 = in1 + (it % p.stages) * p.buf1_elems;
    float *work = kInPlace ? buf1 : buf2;
    // this tile has landed (the stages - 2 after it may still be in flight) ...
    if (p.stages == 3)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    // ... for every thread, and every warp is done with the previous tile: its buffer (which
    // the last steps may have read in place) and buf2 are free
    __syncthreads();
    const int64_t tn = t + int64_t(p.stages - 1) * gridDim.x;
    if (tn < p.ntiles) K::load_tile(p, tn, in1 + ((it + p.stages - 1) % p.stages) * p.buf1_elems);
    cp_async_commit();
    const typename K::ColView cv1 = K::col_view(p.line_tile ? 4 : p.T, 0);
    for (int w = warp; w < items; w += nwarps) {
      const int mg = w / K::NS, ns = w - mg * K::NS;
      float acc[2][WN][4];
      const typename K::ColView cv = K::NS == 1 ? cv1 : K::col_view(p.T, ns);
      if (p.line_tile) {
        K::template compute<true>(buf1, Fs, Fs + P * P, cv, mg, ns, acc);  // (cv unused)
        __syncwarp();  // (in place: every lane has read its rows)
        if (one)
          K::store_rows_global(p, t * p.T, mg, ns, acc);
        else
          K::store_rows_smem(work, mg, ns, acc);
      } else {
        K::template compute<false>(buf1, Fs, Fs + P * P, cv, mg, ns, acc);
        __syncwarp();
        K::store_cols(p, work, cv, mg, ns, one, t, acc);
      }
    }
    if (one) continue;
    __syncthreads();  // work holds step 1's results
    int C = p.line_tile ? P : P * p.T;  // row length of step 2's [a][p][c] view
    for (int s = 1; s < p.nsteps; ++s) {
      const bool last = s + 1 == p.nsteps;
      const float *fh = Fs + s * 2 * P * P;
      // (in place unless last: then one item holds all columns, K::NS == 1)
      // (one column group: the step's view is the same for every item; P = 64 has two)
      const typename K::ColView cv0 = K::col_view(C, 0);
      for (int w = warp; w < items; w += nwarps) {
        const int mg = w / K::NS, ns = w - mg * K::NS;
        float acc[2][WN][4];
        const typename K::ColView cv = K::NS == 1 ? cv0 : K::col_view(C, ns);
        K::template compute<false>(work, fh, fh + P * P, cv, mg, ns, acc);
        __syncwarp();  // every lane has read its chunks before any writes over them
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
