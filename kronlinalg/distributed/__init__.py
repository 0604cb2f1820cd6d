"""kronlinalg.distributed: kron_matmul and Strassen–Winograd over several GPUs or CPU ranks, on
the communicator the user already runs (mpi4py, torch.distributed, CuPy NCCL).

One process per GPU (or CPU rank); every rank calls the same function with its own block.

    >>> from mpi4py import MPI                                  # doctest: +SKIP
    >>> from kronlinalg import distributed as kd
    >>> grid = kd.kron_grid(M, [f.shape for f in factors], MPI.COMM_WORLD)
    >>> y_block = kd.kron_matmul(kd.kron_shard(x, grid, rank), factors,
    ...                          comm=MPI.COMM_WORLD, grid=grid)

Nothing here imports mpi4py, torch or CuPy until a communicator of that kind is wrapped.
See docs/distributed.md for the layouts, the formulas and the launch commands.
"""

from .adapters import CupyNcclCommunicator, MPICommunicator, TorchCommunicator, communicator
from .calibrate import calibrate
from .comm import Communicator, SelfCommunicator
from .kron import kron_bytes, kron_grid, kron_matmul, kron_rounds
from .layout import (cols_split, kron_assemble, kron_block, kron_shard, quadrant_assemble,
                     quadrant_columns, quadrant_shard, rows_split)
from .strassen import strassen_bytes, strassen_matmul
from . import registration as _registration  # noqa: F401  (the planner's candidates)

__all__ = ["Communicator", "SelfCommunicator", "MPICommunicator", "TorchCommunicator",
           "CupyNcclCommunicator", "communicator", "calibrate", "kron_matmul", "kron_grid",
           "kron_rounds", "kron_bytes", "strassen_matmul", "strassen_bytes", "kron_block", "kron_shard",
           "kron_assemble", "quadrant_columns", "quadrant_shard", "quadrant_assemble",
           "rows_split", "cols_split"]
