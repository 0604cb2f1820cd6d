// The FP64 leaf of strassen_matmul from CUTLASS's pieces (built only where CUTLASS's headers are
// found: KL_HAVE_CUTLASS; the `nvidia-cutlass` wheel ships them).  CUTLASS 2.x's sm_90 FP64
// tensor-op mainloop (DefaultGemm<..., OpClassTensorOp, Sm90, ...>: DMMA mma.sync, cp.async
// multistage) computes a CTA's tile of X . Y; our kernel around it adds the tile into the leaf's
// table of signed C blocks by running CUTLASS's epilogue once per target, each with its own
// linear combination (alpha = the target's signed alpha, beta = beta on the target's first write,
// else 1) and the target itself as the source: a read-modify-write, no atomics, so a launch is
// deterministic.  The epilogue stages the accumulators through shared memory per target (every
// iteration starts with a __syncthreads, so the repeated calls cannot race); with beta = 0 on a
// first write the target is not read (BLAS convention).
//
// One CTA: one (leaf = blockIdx.z, tile) pair; the tiles of a leaf are walked in groups of
// kGroupM tile rows (column-major inside a group) so that the CTAs resident at once share A's
// row panels and B's column panels in L2.
#ifndef KRONLINALG_STRASSEN_LEAF_CUTLASS_CUH
#define KRONLINALG_STRASSEN_LEAF_CUTLASS_CUH

#include <cuda_runtime.h>

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/gemm/kernel/default_gemm.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "strassen.h"

namespace kl_strassen {

// BM x BN x BK: the CTA tile; WMS x WNS: a warp's; ST: cp.async stages; IK: the DMMA shape's k
// (m16n8k4 is what CUTLASS's generator instantiates for sm_90 FP64).
template <int BM, int BN, int BK, int WMS, int WNS, int ST, int IK = 4>
struct CutlassLeafF64 {
  using Output = cutlass::epilogue::thread::LinearCombination<double, 1, double, double>;
  using Default = cutlass::gemm::kernel::DefaultGemm<
      double, cutlass::layout::RowMajor, 1, double, cutlass::layout::RowMajor, 1, double,
      cutlass::layout::RowMajor, double, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm90,
      cutlass::gemm::GemmShape<BM, BN, BK>, cutlass::gemm::GemmShape<WMS, WNS, BK>,
      cutlass::gemm::GemmShape<16, 8, IK>, Output,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>, ST, false,
      cutlass::arch::OpMultiplyAdd>;
  using Mma = typename Default::Mma;
  using Epilogue = typename Default::Epilogue;
  union SharedStorage {
    typename Mma::SharedStorage main_loop;
    typename Epilogue::SharedStorage epilogue;
  };
  static constexpr int kM = BM, kN = BN, kThreads = Mma::WarpCount::kCount * 32;
  static constexpr size_t kSmem = sizeof(SharedStorage);
};

constexpr int kGroupM = 8;

template <class Leaf>
__global__ void __launch_bounds__(Leaf::kThreads, 1)
    leaf_f64_cutlass(const __grid_constant__ kl_strassen_sum_leaves p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Mma = typename Leaf::Mma;
  using Epilogue = typename Leaf::Epilogue;
  extern __shared__ __align__(16) unsigned char cutlass_smem[];
  auto &shared = *reinterpret_cast<typename Leaf::SharedStorage *>(cutlass_smem);
  const kl_strassen_sum_leaf &lf = p.leaf[blockIdx.z];

  // grouped tile order: kGroupM tile rows at a time, down the rows first
  const int tiles_m = int((p.m + Leaf::kM - 1) / Leaf::kM);
  const int tiles_n = int((p.n + Leaf::kN - 1) / Leaf::kN);
  const int id = int(blockIdx.x), per_group = kGroupM * tiles_n;
  const int group = id / per_group, first_m = group * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int tm = first_m + (id % per_group) % rows, tn = (id % per_group) / rows;
  if (tm >= tiles_m || tn >= tiles_n) return;

  const int m = int(p.m), n = int(p.n), k = int(p.k);
  const int thread = threadIdx.x, warp = cutlass::canonical_warp_idx_sync(), lane = thread % 32;
  typename Mma::IteratorA it_a(typename Mma::IteratorA::Params(cutlass::layout::RowMajor(p.ldx)),
                               static_cast<double *>(const_cast<void *>(lf.x[0])), {m, k},
                               thread, cutlass::MatrixCoord{tm * Leaf::kM, 0});
  typename Mma::IteratorB it_b(typename Mma::IteratorB::Params(cutlass::layout::RowMajor(p.ldy)),
                               static_cast<double *>(const_cast<void *>(lf.y[0])), {k, n},
                               thread, cutlass::MatrixCoord{0, tn * Leaf::kN});
  typename Mma::FragmentC acc;
  acc.clear();
  {
    Mma mma(shared.main_loop, thread, warp, lane);
    mma((k + Mma::Shape::kK - 1) / Mma::Shape::kK, acc, it_a, it_b, acc);
  }
  __syncthreads();  // the epilogue's staging reuses the mainloop's shared memory

  const double lead = ((lf.xneg ^ lf.yneg) & 1u) ? -1.0 : 1.0;
  Epilogue epilogue(shared.epilogue, thread, warp, lane);
  const typename Epilogue::OutputTileIterator::Params c_params(cutlass::layout::RowMajor(p.ldc));
  const cutlass::MatrixCoord offset{tm * Leaf::kM, tn * Leaf::kN};
  for (int t = 0; t < lf.ntargets; ++t) {
    const bool fresh = (lf.fresh >> t) & 1u;
    const double coef = ((lf.negative >> t) & 1u) ? -lead * p.alpha : lead * p.alpha;
    typename Leaf::Output::Params op_params(coef, fresh ? p.beta : 1.0);
    typename Leaf::Output op(op_params);
    double *c = static_cast<double *>(lf.c[t]);
    typename Epilogue::OutputTileIterator dst(c_params, c, {m, n}, thread, offset);
    typename Epilogue::OutputTileIterator src(c_params, c, {m, n}, thread, offset);
    epilogue(op, dst, acc, src);
  }
#else
  (void)p;
#endif
}

// The launch for one set of leaves (every leaf: one source per operand; m, n, k < 2^31).
template <class Leaf>
inline cudaError_t launch_leaf_f64_cutlass(const kl_strassen_sum_leaves &p, cudaStream_t s) {
  static bool attr = false;  // the shared-memory attribute, once per instantiation
  if (!attr) {
    const cudaError_t err = cudaFuncSetAttribute(
        leaf_f64_cutlass<Leaf>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Leaf::kSmem));
    if (err != cudaSuccess) return err;
    attr = true;
  }
  const int64_t tiles = ((p.m + Leaf::kM - 1) / Leaf::kM) * ((p.n + Leaf::kN - 1) / Leaf::kN);
  const dim3 grid(unsigned(tiles), 1u, unsigned(p.count));
  leaf_f64_cutlass<Leaf><<<grid, Leaf::kThreads, Leaf::kSmem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace kl_strassen

#endif
