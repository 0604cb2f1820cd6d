"""kronlinalg: structured and fast matrix multiplications for array-API code.

    >>> import numpy as np, kronlinalg
    >>> x = np.ones((3, 4 * 5)); fs = [np.eye(4), np.eye(5)]
    >>> kronlinalg.kron_matmul(x, fs).shape
    (3, 20)
"""

from . import _source_guard  # noqa: F401  (the source tree alone: one clear ImportError)
from ._namespace import namespace
from .kron import kron, kron_matmul
from .planner import calibrate, explain, plan

__version__ = "0.1.0"

__all__ = ["kron", "kron_matmul", "namespace", "__version__"]
__all__ += ["plan", "explain", "calibrate"]

from . import ks, structured, testing
from .structured import structured_matmul

__all__ += ["ks", "structured", "structured_matmul"]

from .blocksparse import BlockSparseMatrix, spgemm, spmm  # noqa: E402

__all__ += ["BlockSparseMatrix", "spmm", "spgemm"]
from .blocksparse_batched import BatchedBlockSparseMatrix, spmm_batched  # noqa: E402
__all__ += ["BatchedBlockSparseMatrix", "spmm_batched"]

from .strassen import strassen_matmul

__all__ += ["strassen_matmul"]

from .batched import batched_matmul  # noqa: E402
from .matmul import matmul  # noqa: E402

__all__ += ["batched_matmul", "matmul"]

from .matmul import register_matmul_candidate as _offer  # noqa: E402
from .strassen import matmul_candidate as _strassen_candidate  # noqa: E402

_offer(_strassen_candidate())  # matmul may take Strassen, with matmul(..., allow_strassen=True)

from . import tensor  # noqa: E402

__all__ += ["tensor"]

from .kron_operator import KroneckerOperator  # noqa: E402

__all__ += ["KroneckerOperator"]

from . import distributed  # noqa: E402  (imports no mpi4py, torch or CuPy)

__all__ += ["distributed"]
