"""kronlinalg.tensor: TensorLy's tensor primitives and decompositions on any array-API library.

Names, argument order and semantics follow TensorLy (``tensorly.tenalg`` / ``tensorly``), so
switching is a one-line change.  The tensor is never unfolded: every contraction is a GEMM on
a view of its own C-order layout or a batched product on a small intermediate, through the
array library's own BLAS (cuBLAS under CuPy and torch); MTTKRP never forms the Khatri–Rao
product of the other factors, and a CP-ALS iteration reads the tensor twice whatever its order.

- primitives: khatri_rao, mode_dot, unfolding_dot_khatri_rao (mttkrp), cp_to_tensor;
- multi_mode: multi_mode_dot (an operation of the skeleton: "sequential" or "kron"),
  tucker_to_tensor;
- cp_als: parafac (CP-ALS over a dimension tree, _tree); hooi: tucker (HOSVD from Gram
  matrices, HOOI);
- _engine: the per-library linear algebra (float32 modes TF32/IEEE, half-precision storage);
- fused: the one-pass MTTKRP of the first and the last mode (kernels/tensor, CUDA float32);
- solve: CP-ALS's factor update (Hadamard product, ridge, factorization, solve) in one launch
  (kernels/tensor, CUDA, rank ≤ 64);
- scaling: the half path's operand scaling in one launch each (kernels/tensor, CUDA).
"""

from . import fused, scaling, solve
from .cp_als import CPTensor, parafac
from .hooi import TuckerTensor, tucker
from .multi_mode import MULTI_MODE_DOT, multi_mode_dot, tucker_to_tensor
from .primitives import (cp_to_tensor, khatri_rao, mode_dot, mttkrp,
                         unfolding_dot_khatri_rao)

__all__ = ["khatri_rao", "mode_dot", "multi_mode_dot", "unfolding_dot_khatri_rao", "mttkrp",
           "cp_to_tensor", "tucker_to_tensor", "MULTI_MODE_DOT", "parafac", "tucker",
           "CPTensor", "TuckerTensor"]
