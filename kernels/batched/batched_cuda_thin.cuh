// The thin-product kernel: uniform stacks of products with a short inner dimension (k <= 32, the
// low-rank updates U·Vᵀ of order 64-256) whose operands are each one dense row-major block, the
// products a fixed stride apart (tiny_layout's layout without its size limit).
//
// Why a kernel of its own: a product of 128 x 16 by 16 x 128 reads 8 KB and writes 32 KB (float16),
// so its time is the store stream, and the tile kernels spend theirs on what a long k needs (a
// k-panel pipeline per tile, a barrier a panel): 0.43-0.65 of the copy bandwidth on the H100
// where torch.bmm reaches 0.85-0.9.  Here a block of 4 warps walks output tiles of 64 x 128 of
// the stack (persistent, a ring of 2-4 stages: the next tiles' A rows and B columns land by
// 16-byte cp.async while this one computes and stores), each warp multiplies the whole k straight
// from the stage (ldmatrix fragments from padded rows, as the tiny kernel's fixed orders).  One
// block barrier a tile.  The results: the half types round alpha·AB + beta·C once into the warp's
// staging rows and send them out by bulk copies (rows of 256 bytes or more, sm_90) or 16-byte
// stores; float32 stores a quad's 8-byte pairs (whole 32-byte sectors) from the accumulators and
// gives the staging rows' shared memory to the stages (or, KRONLINALG_BATCHED_THIN_OPTS bit 3,
// sm_90, stages each warp's results half at a time and sends rows out by bulk copies).
//
// MMAs: float16 / bfloat16 m16n8k16 (float32 accumulators), float32 as 3xTF32 m16n8k8; the
// launcher takes this kernel only for those (float64's low-rank stacks reach 0.89-0.94 of copy
// bandwidth on the small tiles already).  H100, 10⁴ products of 128 x 16 x 128 / 128 x 32 x 128,
// loops of calls: float16 0.87-0.89 / 0.89-0.90 of copy bandwidth, float32 0.85 / 0.84
// (benchmarks/batched_thin_ab.py; the versions on the way in docs/batched_matmul.md).
#ifndef KRONLINALG_BATCHED_CUDA_THIN_CUH
#define KRONLINALG_BATCHED_CUDA_THIN_CUH

#include "batched_cuda_tiny.cuh"

namespace kl {
namespace batched {

constexpr int kThinBN = 128;  // tile columns (tile rows: 16 a warp)
constexpr int kThinPad = 8;   // elements added to a B or staging row

struct ThinArgs {
  const void *a, *b, *c;
  void *d;
  int64_t a_bs, b_bs, c_bs, d_bs;  // elements between products (0: shared)
  int64_t count;
  int m, n, k;
  int kp;                 // k rounded up to the MMA's k (the rows [k, kp) of B and columns of A
                          // are zero)
  int tiles_m, tiles_n;   // output tiles a product
  int pa;                 // A's staged row pitch, elements: kp + one 16-byte piece (ldmatrix rows
                          // of a quad's 8 in distinct bank groups)
  int b_off, stage_bytes, stages;
  double alpha, beta;
};

template <class T>
struct ThinTraits {
  static constexpr int E = int(sizeof(T));
  static constexpr int VEC = 16 / E;                    // elements a 16-byte piece
  static constexpr int PB = kThinBN + kThinPad;         // B's pitch
  static constexpr int BPR = kThinBN / VEC;             // 16-byte pieces a tile row
  // the staging rows' pitch: a tile row (half types), or half of one (float32's staged form: a
  // grid warp's 64 columns); 16 rows a warp
  static constexpr int PO = (E == 4 ? kThinBN / 2 : kThinBN) + kThinPad;
  static constexpr int OUT_BYTES = 16 * PO * E;         // a warp's staging rows
  static constexpr int KS = sizeof(T) == 2 ? 16 : 8;    // k of one MMA
  static constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
};

// TMA (half types): the results leave the staging rows by bulk copies (one a row, sm_90), not
// 16-byte stores; (float32, GRID only) they go through staging rows too and out by bulk copies,
// not as 8-byte pairs from the accumulators.  GRID (float32): the warps in a grid of two
// columns, each 32 rows x 64 columns of the tile, not 16 rows x 128: half the B elements split
// to TF32 a warp, twice the A (H100, 10⁴ products: 256 x 32 x 256 0.72 -> 0.78-0.80 of copy,
// 64 x 16 x 64 0.70 -> 0.78, 128 x k x 128 within 0.01).
template <class T, int WARPS, bool TMA, bool GRID>
__global__ void __launch_bounds__(WARPS * 32) thin_kernel(const ThinArgs args) {
  using Tr = ThinTraits<T>;
  constexpr int BM = 16 * WARPS, THREADS = WARPS * 32;
  static_assert(sizeof(T) == 2 || !TMA || GRID, "float32's staged form: the warp grid only");
  KL_DYNAMIC_SMEM(smem);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m = args.m, n = args.n, k = args.k, kp = args.kp, pa = args.pa;
  const int S = args.stages, SB = args.stage_bytes;
  const int per_product = args.tiles_m * args.tiles_n;
  const int64_t items = args.count * per_product;
  const int apr = k * Tr::E / 16;  // 16-byte pieces an A row (k * E is a multiple of 16)
  // (the half types; float32's staged form)
  unsigned char *out_stage = smem + size_t(S) * SB + size_t(warp) * Tr::OUT_BYTES;
  const float alpha = float(args.alpha), beta = float(args.beta);

  // the zeros past k (A's columns, B's rows up to kp) no copy ever writes
  for (int s = 0; s < S; ++s) {
    T *As = reinterpret_cast<T *>(smem + size_t(s) * SB);
    T *Bs = reinterpret_cast<T *>(smem + size_t(s) * SB + args.b_off);
    for (int i = tid; i < BM * (kp - k); i += THREADS)
      As[(i / (kp - k)) * pa + k + i % (kp - k)] = T(0.0f);
    for (int i = tid; i < (kp - k) * Tr::PB; i += THREADS) Bs[k * Tr::PB + i] = T(0.0f);
  }

  struct Tile {
    int64_t p;
    int row0, col0;
  };
  auto tile_of = [&](int64_t it) {
    const int64_t p = it / per_product;
    const int r = int(it - p * per_product);
    return Tile{p, (r / args.tiles_n) * BM, (r % args.tiles_n) * kThinBN};
  };

  // one commit group a tile (empty past the end), into stage s
  auto issue = [&](int64_t it, int s) {
    if (it < items) {
      const Tile tl = tile_of(it);
      unsigned char *st = smem + size_t(s) * SB;
      const T *a = static_cast<const T *>(args.a) + tl.p * args.a_bs + int64_t(tl.row0) * k;
      for (int j = tid; j < BM * apr; j += THREADS) {
        const int r = j / apr, c = j - r * apr;
        const bool ok = tl.row0 + r < m;
        kl::cu::cp_async_16(st + (r * pa) * Tr::E + c * 16, ok ? a + r * k + c * Tr::VEC : a, ok);
      }
      const T *b = static_cast<const T *>(args.b) + tl.p * args.b_bs + tl.col0;
      for (int j = tid; j < k * Tr::BPR; j += THREADS) {
        const int r = j / Tr::BPR, c = j % Tr::BPR;
        const bool ok = tl.col0 + c * Tr::VEC < n;
        kl::cu::cp_async_16(st + args.b_off + (r * Tr::PB) * Tr::E + c * 16,
                            ok ? b + int64_t(r) * n + c * Tr::VEC : b, ok);
      }
    }
    kl::cu::cp_async_commit();
  };

  const int64_t first = blockIdx.x, step = gridDim.x;
#pragma unroll 1
  for (int j = 0; j < S - 1; ++j) issue(first + j * step, j);

#pragma unroll 1
  for (int64_t j = 0;; ++j) {
    const int64_t it = first + j * step;
    if (it >= items) break;
    // this tile's group is in once at most S - 2 newer ones are pending
    switch (S) {
      case 2: kl::cu::cp_async_wait<0>(); break;
      case 3: kl::cu::cp_async_wait<1>(); break;
      default: kl::cu::cp_async_wait<2>(); break;
    }
    // every thread's copies of this tile are visible, and every warp is done with the stage
    // the last tile used: the copies issued next go there
    __syncthreads();
    issue(it + (S - 1) * step, int((j + S - 1) % S));

    const unsigned char *st = smem + size_t(j % S) * SB;
    const T *As = reinterpret_cast<const T *>(st);
    const T *Bs = reinterpret_cast<const T *>(st + args.b_off);
    const Tile tl = tile_of(it);
    const int nv = n - tl.col0 < kThinBN ? n - tl.col0 : kThinBN;  // valid columns
    float acc[kThinBN / 8][4];
#pragma unroll
    for (int ni = 0; ni < kThinBN / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[ni][e] = 0.0f;
#pragma unroll 1
    for (int kk = 0; kk < kp; kk += Tr::KS) {
      if constexpr (sizeof(T) == 2) {
        uint32_t a[4];
        kl::cu::ldsm_x4(a, As + (warp * 16 + (lane & 15)) * pa + kk + (lane >> 4) * 8);
#pragma unroll
        for (int nj = 0; nj < kThinBN / 16; ++nj) {
          if (nj * 16 < nv) {  // (warp-uniform: not the tile's columns past n)
            uint32_t r[4];
            kl::cu::ldsm_x4_trans(r, Bs + (kk + (lane & 15)) * Tr::PB + nj * 16 + (lane >> 4) * 8);
            kl::cu::mma_16816<Tr::BF16>(acc[2 * nj], a, r[0], r[1]);
            kl::cu::mma_16816<Tr::BF16>(acc[2 * nj + 1], a, r[2], r[3]);
          }
        }
      } else if constexpr (GRID) {  // 3xTF32 on a 2-column warp grid, every column's MMAs
        const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;  // the warp's rows and columns
        uint32_t ah[2][4], al[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          uint32_t x[4];
          kl::cu::ldsm_x4(x, As + (wr + mi * 16 + (lane & 15)) * pa + kk + (lane >> 4) * 4);
#pragma unroll
          for (int e = 0; e < 4; ++e) kl::cu::split_tf32(x[e], ah[mi][e], al[mi][e]);
        }
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
          uint32_t bh0, bl0, bh1, bl1;
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t) * Tr::PB + wc + ni * 8 + g]), bh0, bl0);
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t + 4) * Tr::PB + wc + ni * 8 + g]), bh1,
                             bl1);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi)
            mma_3xtf32(acc[mi * 8 + ni], ah[mi], al[mi], bh0, bh1, bl0, bl1);
        }
      } else {
        // 3xTF32, every column block's MMAs, also past n on the zeros there: a branch a block
        // kept ptxas from interleaving the blocks' dependent chains (H100, 10⁴ products of
        // 128 x 16 x 128: 0.66 -> 0.81 of copy bandwidth; the half types' own MMAs ran slower
        // unbranched, 0.83 -> 0.78, and keep theirs)
        uint32_t x[4], ah[4], al[4];
        kl::cu::ldsm_x4(x, As + (warp * 16 + (lane & 15)) * pa + kk + (lane >> 4) * 4);
#pragma unroll
        for (int e = 0; e < 4; ++e) kl::cu::split_tf32(x[e], ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < kThinBN / 8; ++ni) {
          uint32_t bh0, bl0, bh1, bl1;
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t) * Tr::PB + ni * 8 + g]), bh0, bl0);
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t + 4) * Tr::PB + ni * 8 + g]), bh1, bl1);
          mma_3xtf32(acc[ni], ah, al, bh0, bh1, bl0, bl1);
        }
      }
    }

    const int r0 = tl.row0 + warp * 16;  // the warp's first output row
    const int mv = m - r0;                // the warp's valid rows (<= 0: none)
    T *d = static_cast<T *>(args.d) + tl.p * args.d_bs;
    const T *c = beta != 0.0f ? static_cast<const T *>(args.c) + tl.p * args.c_bs : nullptr;
    if constexpr (sizeof(T) == 4 && TMA) {
      // float32 staged: alpha·AB + beta·C into 16 staging rows of 64 columns (pitch 72: a
      // half-warp's pairs, 4 rows x 8 words, in distinct banks), one bulk copy a row, and the
      // warp's 32 x 64 in two halves of 16 rows, the second after the first's copies have read
      // the rows: 4.5 KB a warp (a whole 64 x 128 tile staged, 32 KB a block, cost stages and
      // blocks an SM), and rows of 256 bytes (the half types' bulk copies of 128-byte rows ran
      // slower than 16-byte stores: 0.67 against 0.74; 32 x 32 halves would send 128-byte ones).
      // Every copy is whole 16-byte pieces at 16-byte aligned addresses: n % 4 == 0 (the
      // launcher's check, thin_variant's rows), column offsets multiples of 64.
      T *os = reinterpret_cast<T *>(out_stage);
      const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;  // the warp's rows and columns
      const int nw = nv - wc;                                  // its valid columns (<= 0: none)
      // (no branch skipping a half without valid rows or columns: with one, ptxas gave the
      // 8-warp form 208 registers, not 128)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int rh = tl.row0 + wr + mi * 16;  // the half's first output row
        const int mh = m - rh;                  // its valid rows (<= 0: none)
        kl::cu::bulk_wait_read();  // the last copies out of the staging rows are done reading
        __syncwarp();
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = g + 8 * h, col = ni * 8 + 2 * t;
            const bool in = r < mh && col < nw;  // (C is read only there)
            tiny_store_pair<T>(os + r * Tr::PO + col,
                               c && in ? c + int64_t(rh + r) * n + tl.col0 + wc + col : nullptr,
                               alpha, beta, acc[mi * 8 + ni][2 * h], acc[mi * 8 + ni][2 * h + 1]);
          }
        kl::cu::fence_proxy_async_shared();  // the staging rows, to the bulk copies' proxy
        __syncwarp();
        if (lane < 16 && lane < mh && nw > 0) {
          kl::cu::bulk_store(d + int64_t(rh + lane) * n + tl.col0 + wc, os + lane * Tr::PO,
                             (nw < 64 ? nw : 64) * Tr::E);
          kl::cu::bulk_commit();
        }
      }
    } else if constexpr (sizeof(T) == 4) {
      // float32: alpha·AB + beta·C straight from the accumulators, a quad's 8-byte pairs one
      // whole 32-byte sector of a row (no staging rows: their shared memory went to stages)
#pragma unroll
      for (int ni = 0; ni < kThinBN / 8; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // (GRID: accumulator block ni is rows 16 (ni / 8) of the warp's 32, columns 8 (ni % 8)
          // of its 64)
          const int r = GRID ? (warp >> 1) * 32 - warp * 16 + (ni / 8) * 16 + g + 8 * h
                             : g + 8 * h;
          const int col = GRID ? (warp & 1) * 64 + (ni % 8) * 8 + 2 * t : ni * 8 + 2 * t;
          if (r < mv && col < nv) {
            const int64_t off = int64_t(r0 + r) * n + tl.col0 + col;
            tiny_store_pair<T>(d + off, c ? c + off : nullptr, alpha, beta, acc[ni][2 * h],
                               acc[ni][2 * h + 1]);
          }
        }
    } else {
      // the half types: alpha·AB + beta·C, rounded once, into the warp's staging rows (pairs: a
      // quad's in distinct banks), then out in 16-byte pieces or, TMA, a bulk copy a row
      T *os = reinterpret_cast<T *>(out_stage);
      if constexpr (TMA) {  // the last tile's bulk copies are done reading the staging rows
        kl::cu::bulk_wait_read();
        __syncwarp();
      }
#pragma unroll
      for (int ni = 0; ni < kThinBN / 8; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = g + 8 * h, col = ni * 8 + 2 * t;
          const bool in = r < mv && col < nv;  // (C is read only there)
          tiny_store_pair<T>(os + r * Tr::PO + col,
                             c && in ? c + int64_t(r0 + r) * n + tl.col0 + col : nullptr, alpha,
                             beta, acc[ni][2 * h], acc[ni][2 * h + 1]);
        }
      if constexpr (TMA) {
        kl::cu::fence_proxy_async_shared();  // the staging rows, to the bulk copies' proxy
        __syncwarp();
        if (lane < 16 && lane < mv) {
          kl::cu::bulk_store(d + int64_t(r0 + lane) * n + tl.col0, os + lane * Tr::PO,
                             nv * Tr::E);
          kl::cu::bulk_commit();
        }
      } else {
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 16 * Tr::BPR / 32; ++i) {
          const int jj = lane + 32 * i, r = jj / Tr::BPR, cpiece = jj % Tr::BPR;
          if (r < mv && cpiece * Tr::VEC < nv)
            *reinterpret_cast<uint4 *>(d + int64_t(r0 + r) * n + tl.col0 + cpiece * Tr::VEC) =
                *reinterpret_cast<const uint4 *>(os + r * Tr::PO + cpiece * Tr::VEC);
        }
      }
      __syncwarp();  // the staging rows are free for the next tile
    }
  }
  kl::cu::cp_async_wait<0>();
  if constexpr (TMA) kl::cu::bulk_wait();  // (the staging rows live as long as the block)
}

// Whether a uniform problem fits this kernel (thin_variant's sizes, tiny_layout's dense layout
// with every row a whole number of 16-byte pieces), and its per-product strides.
inline bool thin_layout(const kl_batched_problem &p, int64_t count, int elem, int64_t *strides) {
  return thin_variant(p.m, p.n, p.k, elem) && dense_layout(p, count, elem, strides);
}

// Shared memory of a launch with `stages` stages of stage_bytes and the warps' staging rows (the
// half types; float32 only in its staged form, TMA).
template <class T, bool TMA>
inline int thin_smem(int warps, int stages, int stage_bytes) {
  return stages * stage_bytes + (sizeof(T) == 2 || TMA ? warps * ThinTraits<T>::OUT_BYTES : 0);
}

// KRONLINALG_BATCHED_THIN_OPTS, for comparisons (-1, the default: the measured choice below):
// bit 0 blocks of 8 warps (128 x 128 tiles) instead of 4 (64 x 128), bit 1 the half types'
// results out by bulk copies (compute capability 9.0 and newer), bit 2 float32's warps in rows
// of the tile (16 x 128 each) instead of the grid, bit 3 float32's grid results through staging
// rows and out by bulk copies (compute capability 9.0 and newer; not with bit 2)
inline int thin_opts() { return kl::knob_int("KRONLINALG_BATCHED_THIN_OPTS", -1); }

template <class T, int WARPS, bool TMA, bool GRID>
cudaError_t launch_thin_warps(ThinArgs a, cudaStream_t stream) {
  using Tr = ThinTraits<T>;
  constexpr int BM = 16 * WARPS;
  a.tiles_m = (a.m + BM - 1) / BM;
  a.b_off = round16(int64_t(BM) * a.pa * Tr::E);
  a.stage_bytes = a.b_off + round16(int64_t(a.kp) * Tr::PB * Tr::E);
  // as many stages (2..4) as leave room for 16 warps an SM (4-warp blocks: 4 of them), the
  // staging rows counted (float32 staged, 4 warps, order 128: k = 16 2 stages, k = 32 2 stages
  // and 3 blocks an SM; 8 warps: 4 and 2 stages, 2 blocks)
  constexpr int kSmemSM = 220 * 1024, blocks = 16 / WARPS > 2 ? 16 / WARPS : 2;
  a.stages = 4;
  while (a.stages > 2 && blocks * thin_smem<T, TMA>(WARPS, a.stages, a.stage_bytes) > kSmemSM)
    --a.stages;
  return launch_resident(thin_kernel<T, WARPS, TMA, GRID>, a, WARPS * 32,
                         thin_smem<T, TMA>(WARPS, a.stages, a.stage_bytes),
                         a.count * a.tiles_m * a.tiles_n, stream);
}

// Launches the thin kernel for a problem thin_layout accepted.
template <class T>
cudaError_t launch_thin(const kl_batched_problem &p, int64_t count, const int64_t *strides,
                        cudaStream_t stream) {
  using Tr = ThinTraits<T>;
  ThinArgs a{};
  a.a = p.a, a.b = p.b, a.c = p.c, a.d = p.d;
  a.a_bs = strides[0], a.b_bs = strides[1], a.c_bs = strides[2], a.d_bs = strides[3];
  a.count = count;
  a.m = int(p.m), a.n = int(p.n), a.k = int(p.k);
  a.kp = (a.k + Tr::KS - 1) / Tr::KS * Tr::KS;
  a.tiles_n = (a.n + kThinBN - 1) / kThinBN;
  a.pa = a.kp + Tr::VEC;
  a.alpha = p.alpha, a.beta = p.beta;
  int opts = thin_opts();
  if (opts < 0) {
    // the half types' rows of 256 bytes or more by bulk copies (H100, 10⁴ products of 128 x 16
    // x 128 / 256 x 16 x 256: 0.86 / 0.87 of copy bandwidth against 0.84 / 0.82; rows of 128
    // bytes, order 64: 0.67 against 0.74); float32 from 128 x 128: 8-warp blocks, staged (H100,
    // run s16e, 10⁴ products, m x k x n: 128 x 16 / 32 x 128 0.88 / 0.88 against 0.83 / 0.81,
    // 256 x 16 / 32 x 256 0.84 / 0.77 against 0.74 / 0.74; at 64 x 16 x 64 it ran 0.35)
    if constexpr (sizeof(T) == 2) opts = a.n * Tr::E >= 256 ? 2 : 0;
    else opts = a.m >= 128 && a.n >= 128 ? 9 : 0;
  }
  // bulk copies: the half types' (bit 1), float32's staged grid (bit 3: its copies are whole
  // 16-byte pieces where n % 4 == 0, which thin_layout's rows of 16-byte pieces give; else its
  // 8-byte pairs)
  bool tma = sizeof(T) == 2 ? (opts & 2) != 0 : (opts & 12) == 8 && a.n % Tr::VEC == 0;
#ifndef KL_BATCHED_EMULATE
  DeviceInfo dev;
  tma = tma && query_device(&dev) == cudaSuccess && dev.cc_major >= 9;
#endif
  if constexpr (sizeof(T) == 2) {
    if (tma)
      return opts & 1 ? launch_thin_warps<T, 8, true, false>(a, stream)
                      : launch_thin_warps<T, 4, true, false>(a, stream);
  } else {
    if (tma)
      return opts & 1 ? launch_thin_warps<T, 8, true, true>(a, stream)
                      : launch_thin_warps<T, 4, true, true>(a, stream);
    if (!(opts & 4))  // float32: the warp grid unless bit 2 asks for rows
      return opts & 1 ? launch_thin_warps<T, 8, false, true>(a, stream)
                      : launch_thin_warps<T, 4, false, true>(a, stream);
  }
  return opts & 1 ? launch_thin_warps<T, 8, false, false>(a, stream)
                  : launch_thin_warps<T, 4, false, false>(a, stream);
}

}  // namespace batched
}  // namespace kl

#endif
