// The tiny-product kernel: uniform stacks of products with m, n, k <= 32 whose operands are each
// one dense row-major block (A m x k, B k x n, D and C m x n), the products a fixed stride apart.
//
// Why a kernel of its own: at these orders a product is 0.75-24 KB of traffic and a few dozen
// MMAs, so the time is all memory latency, and what matters is how many products' bytes are in
// flight.  The tile kernels (batched_cuda_kernels.cuh) carry the general machinery (any strides,
// batch dimensions split per product, k-panels, a group barrier a panel): 128 registers with
// 150-300 bytes of spills, one product in flight a warp, ~20 µs for 10⁴ float16 products of order
// 16 (H100, 0.26 of copy bandwidth).  Here one warp owns a product at a time and keeps STAGES
// products in flight: each operand is one contiguous chunk, copied by 16-byte cp.async into the
// warp's ring (no layout change), the fragments are read from it element by element (the reads
// cost far less than the bytes' latency at these sizes), and the result goes back through the
// consumed stage as accumulators, then out with 16-byte stores (beta * C read the same way).
// Only the warp's own barrier (__syncwarp) is ever needed.
//
// MMAs: float16 / bfloat16 m16n8k16 (float32 accumulators), float32 as 3xTF32 m16n8k8, float64
// m16n8k8 DMMA (sm_90); the launcher takes this kernel only for those.
#ifndef KRONLINALG_BATCHED_CUDA_TINY_CUH
#define KRONLINALG_BATCHED_CUDA_TINY_CUH

#include "batched_cuda_large.cuh"

namespace kl {
namespace batched {

constexpr int kTinyMax = 32;     // largest m, n, k
constexpr int kTinyWarps = 4;    // warps a block

// One launch's description: product i's A at a + i * a_bs (elements), and so on.
struct TinyArgs {
  const void *a, *b, *c;
  void *d;
  int64_t a_bs, b_bs, c_bs, d_bs;
  int64_t count;
  int m, n, k, stages;
  int stage_bytes;  // a stage: A's chunk, B's (each rounded up to 16 bytes), or the m x n
                    // accumulators of the epilogue, whichever is larger
  double alpha, beta;
};

template <class T>
struct TinyTraits {
  static constexpr bool F64 = std::is_same_v<T, double>;
  static constexpr bool TF32 = std::is_same_v<T, float>;
  static constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  using Acc = std::conditional_t<F64, double, float>;
  static constexpr int KS = sizeof(T) == 2 ? 16 : 8;  // k of one MMA
};

__host__ __device__ inline int round16(int64_t bytes) { return int((bytes + 15) / 16 * 16); }

// The bytes of one stage for (m, n, k) in T (accumulators in Acc).
template <class T>
inline int tiny_stage_bytes(int m, int n, int k) {
  const int ab = round16(int64_t(m) * k * int(sizeof(T))) + round16(int64_t(k) * n * int(sizeof(T)));
  const int acc = round16(int64_t(m) * n * int(sizeof(typename TinyTraits<T>::Acc)));
  return ab > acc ? ab : acc;
}

// `bytes` bytes from src to dst (both 16-byte aligned) by the warp's lanes, 16 at a time (the
// last piece zero-filled past the end).
__device__ __forceinline__ void tiny_copy_in(unsigned char *dst, const unsigned char *src,
                                             int bytes, int lane) {
  for (int off = lane * 16; off < bytes; off += 32 * 16) {
    const int left = bytes - off;
    kl::cu::cp_async_16_part(dst + off, src + off, left < 16 ? left : 16);
  }
}

// A warp's place in a launch: its ring of S stages of SB bytes, its first product and the
// stride between its products.
struct TinyRing {
  unsigned char *ring;
  int64_t first, step;
  int S, SB;
  __device__ TinyRing(unsigned char *smem, const TinyArgs &args, int warp)
      : ring(smem + size_t(warp) * args.stages * args.stage_bytes),
        first(int64_t(blockIdx.x) * kTinyWarps + warp),
        step(int64_t(gridDim.x) * kTinyWarps),
        S(args.stages),
        SB(args.stage_bytes) {}
  __device__ int64_t product(int64_t j) const { return first + j * step; }
  __device__ unsigned char *stage(int64_t j) const { return ring + (j % S) * SB; }
  // all but the S - 1 newest commit groups are in (wait_group takes an immediate)
  __device__ void wait() const {
    switch (S) {
      case 2: kl::cu::cp_async_wait<1>(); break;
      case 3: kl::cu::cp_async_wait<2>(); break;
      default: kl::cu::cp_async_wait<3>(); break;
    }
  }
};

// The element (r, c) of a row-major block with `cols` columns, or zero outside rows x cols.
template <class T>
__device__ __forceinline__ T tiny_at(const T *x, int r, int c, int rows, int cols) {
  return (r < rows && c < cols) ? x[r * cols + c] : T(0.0f);
}

template <class T>
__device__ __forceinline__ uint32_t tiny_pair(T lo, T hi) {
  uint16_t l, h;
  memcpy(&l, &lo, 2);
  memcpy(&h, &hi, 2);
  return uint32_t(l) | (uint32_t(h) << 16);
}

// acc[mi][ni] += A (rows mi*16..) x B (columns ni*8..), the whole k, from one stage.
template <class T>
__device__ __forceinline__ void tiny_mma(typename TinyTraits<T>::Acc (&acc)[2][4][4],
                                         const T *As, const T *Bs, int m, int n, int k,
                                         int lane) {
  using Tr = TinyTraits<T>;
  const int g = lane >> 2, t = lane & 3;
  const int mi_n = (m + 15) / 16, ni_n = (n + 7) / 8;
#pragma unroll 1
  for (int kk = 0; kk < k; kk += Tr::KS) {
    if constexpr (sizeof(T) == 2) {
      uint32_t b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g, r = kk + 2 * t;
        b[ni][0] = tiny_pair(tiny_at(Bs, r, c, k, n), tiny_at(Bs, r + 1, c, k, n));
        b[ni][1] = tiny_pair(tiny_at(Bs, r + 8, c, k, n), tiny_at(Bs, r + 9, c, k, n));
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g, c0 = kk + 2 * t;
        const uint32_t a[4] = {
            tiny_pair(tiny_at(As, r0, c0, m, k), tiny_at(As, r0, c0 + 1, m, k)),
            tiny_pair(tiny_at(As, r0 + 8, c0, m, k), tiny_at(As, r0 + 8, c0 + 1, m, k)),
            tiny_pair(tiny_at(As, r0, c0 + 8, m, k), tiny_at(As, r0, c0 + 9, m, k)),
            tiny_pair(tiny_at(As, r0 + 8, c0 + 8, m, k), tiny_at(As, r0 + 8, c0 + 9, m, k))};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) kl::cu::mma_16816<Tr::BF16>(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    } else if constexpr (Tr::F64) {
      double b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g;
        b[ni][0] = tiny_at(Bs, kk + t, c, k, n);
        b[ni][1] = tiny_at(Bs, kk + t + 4, c, k, n);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g;
        const double a[4] = {tiny_at(As, r0, kk + t, m, k), tiny_at(As, r0 + 8, kk + t, m, k),
                             tiny_at(As, r0, kk + t + 4, m, k),
                             tiny_at(As, r0 + 8, kk + t + 4, m, k)};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) dmma_1688(acc[mi][ni], a, b[ni][0], b[ni][1]);
      }
    } else {  // 3xTF32, as the large-tile kernel: small terms first, then one IEEE add
      uint32_t bh[4][2], bl[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c = ni * 8 + g;
        kl::cu::split_tf32(__float_as_uint(tiny_at(Bs, kk + t, c, k, n)), bh[ni][0], bl[ni][0]);
        kl::cu::split_tf32(__float_as_uint(tiny_at(Bs, kk + t + 4, c, k, n)), bh[ni][1],
                           bl[ni][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (mi >= mi_n) continue;
        const int r0 = mi * 16 + g;
        const float x[4] = {tiny_at(As, r0, kk + t, m, k), tiny_at(As, r0 + 8, kk + t, m, k),
                            tiny_at(As, r0, kk + t + 4, m, k),
                            tiny_at(As, r0 + 8, kk + t + 4, m, k)};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) kl::cu::split_tf32(__float_as_uint(x[e]), ah[e], al[e]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          if (ni < ni_n) mma_3xtf32(acc[mi][ni], ah, al, bh[ni][0], bh[ni][1], bl[ni][0], bl[ni][1]);
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kTinyWarps * 32) tiny_kernel(const TinyArgs args) {
  using Tr = TinyTraits<T>;
  using Acc = typename Tr::Acc;
  KL_DYNAMIC_SMEM(smem);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int m = args.m, n = args.n, k = args.k;
  const int a_bytes = m * k * int(sizeof(T)), b_bytes = k * n * int(sizeof(T));
  const int b_off = round16(a_bytes);
  const TinyRing ring(smem, args, warp);
  const int S = ring.S;
  const Acc alpha = Acc(args.alpha), beta = Acc(args.beta);

  // one commit group a product (empty past the end), into stage j % S
  auto issue = [&](int64_t j) {
    const int64_t p = ring.product(j);
    if (p < args.count) {
      unsigned char *st = ring.stage(j);
      tiny_copy_in(st, static_cast<const unsigned char *>(args.a) + p * args.a_bs * int64_t(sizeof(T)),
                   a_bytes, lane);
      tiny_copy_in(st + b_off,
                   static_cast<const unsigned char *>(args.b) + p * args.b_bs * int64_t(sizeof(T)),
                   b_bytes, lane);
    }
    kl::cu::cp_async_commit();
  };
#pragma unroll 1
  for (int j = 0; j < S - 1; ++j) issue(j);

#pragma unroll 1
  for (int64_t j = 0;; ++j) {
    const int64_t p = ring.product(j);
    if (p >= args.count) break;
    unsigned char *st = ring.stage(j);
    issue(j + S - 1);  // into the stage consumed last step
    ring.wait();          // this product's copies are in
    __syncwarp();
    Acc acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = Acc(0);
    tiny_mma<T>(acc, reinterpret_cast<const T *>(st), reinterpret_cast<const T *>(st + b_off), m,
                n, k, lane);
    __syncwarp();  // every lane is done reading the operands: the stage takes the accumulators
    Acc *cs = reinterpret_cast<Acc *>(st);
    {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = mi * 16 + g + (e >> 1) * 8, c = ni * 8 + 2 * t + (e & 1);
            if (r < m && c < n) cs[r * n + c] = acc[mi][ni][e];
          }
    }
    __syncwarp();
    // D = alpha * acc + beta * C, VEC elements (16 bytes) a lane at a time
    constexpr int VEC = 16 / int(sizeof(T));
    const int mn = m * n;
    T *d = static_cast<T *>(args.d) + p * args.d_bs;
    const T *c = beta != Acc(0) ? static_cast<const T *>(args.c) + p * args.c_bs : nullptr;
    for (int i0 = lane * VEC; i0 < mn; i0 += 32 * VEC) {
      union {
        uint4 u;
        T e[VEC];
      } cv, dv;
      const bool full = i0 + VEC <= mn;
      if (c) {
        if (full) cv.u = *reinterpret_cast<const uint4 *>(c + i0);
        else
          for (int e = 0; e < VEC; ++e) cv.e[e] = i0 + e < mn ? c[i0 + e] : T(0.0f);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        Acc v = i0 + e < mn ? alpha * cs[i0 + e] : Acc(0);
        if (c) v += beta * to_acc<Acc>(cv.e[e]);
        dv.e[e] = from_acc<T>(v);
      }
      if (full) *reinterpret_cast<uint4 *>(d + i0) = dv.u;
      else
        for (int e = 0; e < VEC && i0 + e < mn; ++e) d[i0 + e] = dv.e[e];
    }
    __syncwarp();  // the stage is free for the copies issued next step
  }
  kl::cu::cp_async_wait<0>();
}

// ---- square orders 16 and 32: sizes known at compile time --------------------------------
//
// The generic kernel above pays for its run-time sizes per element (bounds, index arithmetic,
// scalar fragment reads from the unpadded chunk, whose row pitch puts a quad's reads in one bank)
// and for its epilogue's round trip through shared memory: at order 32 it issued more than the
// bytes needed (H100, 10⁴ float16 products: 50.7 µs, the tile kernels 42).  Here each operand's
// rows land at a padded pitch (16-byte pieces, rows a multiple of 16 bytes), the half types'
// and 3xTF32's A fragments come by ldmatrix, B's by ldmatrix.trans (half types) or
// conflict-free scalar reads, and the accumulators go straight to D in element pairs (a quad
// writes 8 contiguous elements of a row).
template <class T, int ORDER>
struct TinyFixed {
  static constexpr int E = int(sizeof(T));
  static constexpr bool F64 = E == 8, TF32 = std::is_same_v<T, float>;
  // pitches in elements: ldmatrix rows in distinct 16-byte bank groups (A; half types' B), the
  // scalar reads of a quad's 4 x 8 in distinct banks (3xTF32's B: + 8 floats; float64: 4 mod 16)
  static constexpr int PA = F64 ? ORDER + 4 : ORDER + 16 / E;
  static constexpr int PB = F64 ? ORDER + 4 : TF32 ? ORDER + 8 : ORDER + 8;
  static constexpr int A_BYTES = ORDER * PA * E, STAGE = ORDER * PA * E + ORDER * PB * E;
  static_assert(E != 2 || ORDER * (ORDER + 8) * E <= STAGE, "the half types' results fit a stage");
  static constexpr int MI = ORDER / 16, NI = ORDER / 8, CPR = ORDER * E / 16;  // 16-byte pieces a row
};

// A dense ORDER x ORDER block into rows of `pitch` elements.
template <class T, int ORDER, int PITCH>
__device__ __forceinline__ void tiny_rows_in(unsigned char *dst, const unsigned char *src, int lane) {
  constexpr int CPR = ORDER * int(sizeof(T)) / 16, PIECES = ORDER * CPR;
#pragma unroll
  for (int j = lane; j < PIECES; j += 32)
    kl::cu::cp_async_16(dst + (j / CPR) * PITCH * int(sizeof(T)) + (j % CPR) * 16, src + j * 16, true);
}

template <class T>
__device__ __forceinline__ void tiny_store_pair(T *d, const T *c, typename TinyTraits<T>::Acc alpha,
                                                typename TinyTraits<T>::Acc beta,
                                                typename TinyTraits<T>::Acc x0,
                                                typename TinyTraits<T>::Acc x1) {
  using Acc = typename TinyTraits<T>::Acc;
  Acc v0 = alpha * x0, v1 = alpha * x1;
  if (c) {
    v0 += beta * to_acc<Acc>(c[0]);
    v1 += beta * to_acc<Acc>(c[1]);
  }
  if constexpr (sizeof(T) == 2) {
    *reinterpret_cast<uint32_t *>(d) = tiny_pair(from_acc<T>(v0), from_acc<T>(v1));
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float2 *>(d) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<double2 *>(d) = make_double2(v0, v1);
  }
}

template <class T, int ORDER>
__global__ void __launch_bounds__(kTinyWarps * 32) tiny_fixed_kernel(const TinyArgs args) {
  using Tr = TinyTraits<T>;
  using Acc = typename Tr::Acc;
  using F = TinyFixed<T, ORDER>;
  KL_DYNAMIC_SMEM(smem);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const TinyRing ring(smem, args, warp);
  const int S = ring.S;
  const Acc alpha = Acc(args.alpha), beta = Acc(args.beta);

  auto issue = [&](int64_t j) {
    const int64_t p = ring.product(j);
    if (p < args.count) {
      unsigned char *st = ring.stage(j);
      tiny_rows_in<T, ORDER, F::PA>(
          st, static_cast<const unsigned char *>(args.a) + p * args.a_bs * F::E, lane);
      tiny_rows_in<T, ORDER, F::PB>(
          st + F::A_BYTES, static_cast<const unsigned char *>(args.b) + p * args.b_bs * F::E, lane);
    }
    kl::cu::cp_async_commit();
  };
#pragma unroll 1
  for (int j = 0; j < S - 1; ++j) issue(j);

#pragma unroll 1
  for (int64_t j = 0;; ++j) {
    const int64_t p = ring.product(j);
    if (p >= args.count) break;
    const unsigned char *st = ring.stage(j);
    issue(j + S - 1);
    ring.wait();
    __syncwarp();
    const T *As = reinterpret_cast<const T *>(st);
    const T *Bs = reinterpret_cast<const T *>(st + F::A_BYTES);
    Acc acc[F::MI][F::NI][4];
#pragma unroll
    for (int mi = 0; mi < F::MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < F::NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = Acc(0);
#pragma unroll
    for (int kk = 0; kk < ORDER; kk += Tr::KS) {
      if constexpr (sizeof(T) == 2) {
        uint32_t a[F::MI][4], b[F::NI][2];
#pragma unroll
        for (int mi = 0; mi < F::MI; ++mi)
          kl::cu::ldsm_x4(a[mi], As + (mi * 16 + (lane & 15)) * F::PA + kk + (lane >> 4) * 8);
#pragma unroll
        for (int nj = 0; nj < F::NI / 2; ++nj) {
          uint32_t r[4];
          kl::cu::ldsm_x4_trans(r, Bs + (kk + (lane & 15)) * F::PB + nj * 16 + (lane >> 4) * 8);
          b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < F::MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < F::NI; ++ni)
            kl::cu::mma_16816<Tr::BF16>(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      } else if constexpr (F::F64) {
        double b[F::NI][2];
#pragma unroll
        for (int ni = 0; ni < F::NI; ++ni) {
          b[ni][0] = Bs[(kk + t) * F::PB + ni * 8 + g];
          b[ni][1] = Bs[(kk + t + 4) * F::PB + ni * 8 + g];
        }
#pragma unroll
        for (int mi = 0; mi < F::MI; ++mi) {
          const double *r0 = As + (mi * 16 + g) * F::PA + kk + t, *r1 = r0 + 8 * F::PA;
          const double a[4] = {r0[0], r1[0], r0[4], r1[4]};
#pragma unroll
          for (int ni = 0; ni < F::NI; ++ni) dmma_1688(acc[mi][ni], a, b[ni][0], b[ni][1]);
        }
      } else {
        uint32_t bh[F::NI][2], bl[F::NI][2];
#pragma unroll
        for (int ni = 0; ni < F::NI; ++ni) {
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t) * F::PB + ni * 8 + g]), bh[ni][0], bl[ni][0]);
          kl::cu::split_tf32(__float_as_uint(Bs[(kk + t + 4) * F::PB + ni * 8 + g]), bh[ni][1],
                             bl[ni][1]);
        }
#pragma unroll
        for (int mi = 0; mi < F::MI; ++mi) {
          uint32_t x[4], ah[4], al[4];
          kl::cu::ldsm_x4(x, As + (mi * 16 + (lane & 15)) * F::PA + kk + (lane >> 4) * 4);
#pragma unroll
          for (int e = 0; e < 4; ++e) kl::cu::split_tf32(x[e], ah[e], al[e]);
#pragma unroll
          for (int ni = 0; ni < F::NI; ++ni)
            mma_3xtf32(acc[mi][ni], ah, al, bh[ni][0], bh[ni][1], bl[ni][0], bl[ni][1]);
        }
      }
    }
    __syncwarp();  // every lane is done with the stage's operands
    T *d = static_cast<T *>(args.d) + p * args.d_bs;
    const T *c = beta != Acc(0) ? static_cast<const T *>(args.c) + p * args.c_bs : nullptr;
    if constexpr (F::E == 2) {
      // half types: the results (rounded once, beta * C included) through the stage, rows of
      // PO elements (a quad's pairs in distinct banks), then out in 16-byte pieces: a pair
      // store writes 4 bytes, half a sector, and ran the order-32 stacks at 0.63 of copy
      // bandwidth where float32's 8-byte pairs reached 0.85 (H100)
      constexpr int PO = ORDER + 8, CPR = ORDER / 8;
      T *os = reinterpret_cast<T *>(const_cast<unsigned char *>(st));
#pragma unroll
      for (int mi = 0; mi < F::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < F::NI; ++ni)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = mi * 16 + g + 8 * h, col = ni * 8 + 2 * t;
            tiny_store_pair<T>(os + r * PO + col, c ? c + r * ORDER + col : nullptr, alpha, beta,
                               acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
          }
      __syncwarp();
#pragma unroll
      for (int j = lane; j < ORDER * CPR; j += 32)
        reinterpret_cast<uint4 *>(d)[j] =
            *reinterpret_cast<const uint4 *>(os + (j / CPR) * PO + (j % CPR) * 8);
    } else {
#pragma unroll
      for (int mi = 0; mi < F::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < F::NI; ++ni)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int off = (mi * 16 + g + 8 * h) * ORDER + ni * 8 + 2 * t;
            tiny_store_pair<T>(d + off, c ? c + off : nullptr, alpha, beta, acc[mi][ni][2 * h],
                               acc[mi][ni][2 * h + 1]);
          }
    }
    __syncwarp();  // the stage is free for the copies issued next step
  }
  kl::cu::cp_async_wait<0>();
}

// Whether every operand of a uniform problem is one dense row-major block, the batch dimensions
// one fixed stride each (broadcast: stride 0 over all of them), every address and stride a
// multiple of 16 bytes -- the tiny and thin kernels' layout --, and its per-product strides.
inline bool dense_layout(const kl_batched_problem &p, int64_t count, int elem, int64_t *strides) {
  if (p.m < 1 || p.n < 1 || p.k < 1) return false;
  const bool with_c = p.beta != 0.0;
  if (p.a_cs != 1 || p.a_rs != p.k || p.b_cs != 1 || p.b_rs != p.n || p.d_cs != 1 ||
      p.d_rs != p.n || (with_c && (p.c_cs != 1 || p.c_rs != p.n)))
    return false;
  // a single stride s with offset(i) = i * s over the batch dimensions (row-major index)
  auto flat = [&](const int64_t *bs, int64_t *s) {
    int64_t expect = -1;
    *s = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      if (p.shape[d] == 1) continue;
      if (expect < 0) *s = expect = bs[d];
      else if (bs[d] != expect) return false;
      expect *= p.shape[d];
    }
    return true;
  };
  const void *ptrs[4] = {p.a, p.b, with_c ? p.c : nullptr, p.d};
  const int64_t *bss[4] = {p.a_bs, p.b_bs, p.c_bs, p.d_bs};
  for (int i = 0; i < 4; ++i) {
    strides[i] = 0;
    if (i == 2 && !with_c) continue;
    if (!flat(bss[i], &strides[i])) return false;
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16) return false;
    if (count > 1 && (strides[i] * elem) % 16) return false;
  }
  return true;
}

// Whether a uniform problem fits this kernel (orders up to kTinyMax, dense_layout), and its
// per-product strides.  (The kernel's MMA kinds are the launcher's check.)
inline bool tiny_layout(const kl_batched_problem &p, int64_t count, int elem, int64_t *strides) {
  return p.m <= kTinyMax && p.n <= kTinyMax && p.k <= kTinyMax &&
         dense_layout(p, count, elem, strides);
}

// Shared memory of a launch: `stages` stages of `stage_bytes` for each of the block's warps, as
// many stages (2..4) as leave the most blocks an SM room (blocks of small stages: 4 an SM, the
// registers' limit; float64 order 32: one block of 3).
inline int tiny_stages(int stage_bytes) {
  constexpr int kSmemSM = 220 * 1024;
  for (int blocks : {4, 2, 1}) {
    const int s = kSmemSM / (blocks * kTinyWarps * stage_bytes);
    if (s >= 3 || (blocks == 1 && s >= 2)) return s > 4 ? 4 : s;
  }
  return 2;
}

// A launch of a tiny kernel: a warp per product at a time (launch_resident).
template <class Kernel>
cudaError_t launch_tiny_kernel(Kernel kernel, const TinyArgs &a, int smem, cudaStream_t stream) {
  return launch_resident(kernel, a, kTinyWarps * 32, smem, (a.count + kTinyWarps - 1) / kTinyWarps,
                         stream);
}

// Launches the tiny kernel for a problem tiny_layout accepted.
template <class T>
cudaError_t launch_tiny(const kl_batched_problem &p, int64_t count, const int64_t *strides,
                        cudaStream_t stream) {
  TinyArgs a{};
  a.a = p.a, a.b = p.b, a.c = p.c, a.d = p.d;
  a.a_bs = strides[0], a.b_bs = strides[1], a.c_bs = strides[2], a.d_bs = strides[3];
  a.count = count;
  a.m = int(p.m), a.n = int(p.n), a.k = int(p.k);
  a.alpha = p.alpha, a.beta = p.beta;
  const int variant = tiny_variant(p.m, p.n, p.k, int(sizeof(T)));
  if (variant == 16 || variant == 32) {
    a.stage_bytes = variant == 16 ? TinyFixed<T, 16>::STAGE : TinyFixed<T, 32>::STAGE;
    a.stages = tiny_stages(a.stage_bytes);
    const int smem = kTinyWarps * a.stages * a.stage_bytes;
    return variant == 16 ? launch_tiny_kernel(tiny_fixed_kernel<T, 16>, a, smem, stream)
                         : launch_tiny_kernel(tiny_fixed_kernel<T, 32>, a, smem, stream);
  }
  a.stage_bytes = tiny_stage_bytes<T>(a.m, a.n, a.k);
  a.stages = tiny_stages(a.stage_bytes);
  return launch_tiny_kernel(tiny_kernel<T>, a, kTinyWarps * a.stages * a.stage_bytes, stream);
}

}  // namespace batched
}  // namespace kl

#endif
