"""One adapter per communication library the user already runs: mpi4py, torch.distributed,
CuPy's NCCL.  Each is imported only when a communicator of its kind is wrapped, so
``import kronlinalg`` imports none of them.

- `MPICommunicator(comm)`: an mpi4py communicator; NumPy arrays (and torch CPU tensors); CuPy
  arrays only where the MPI library is CUDA-aware (not checked).
- `TorchCommunicator(group=None)`: a torch.distributed process group (NCCL for CUDA tensors,
  gloo for CPU tensors); point-to-point through ``batch_isend_irecv``.
- `CupyNcclCommunicator(comm)`: a ``cupy.cuda.nccl.NcclCommunicator``; CuPy arrays, on the
  current stream.

`communicator(obj)` wraps whichever of them obj is (a Communicator passes through).
"""

from __future__ import annotations

import numpy as np

from .comm import Communicator, SelfCommunicator

__all__ = ["communicator", "MPICommunicator", "TorchCommunicator", "CupyNcclCommunicator"]

_TAG = 0x6B6C  # the MPI tag of every kronlinalg message


def communicator(obj=None) -> Communicator:
    """The Communicator for obj: a Communicator, an mpi4py communicator, a torch.distributed
    ProcessGroup (None: torch's default group, when it is initialised), or a CuPy
    NcclCommunicator.  A TypeError names what else it got."""
    if isinstance(obj, Communicator):
        return obj
    mod = type(obj).__module__ or ""
    if mod.startswith("mpi4py"):
        return MPICommunicator(obj)
    if mod.startswith("torch") or obj is None:
        if obj is None:
            import sys

            dist = sys.modules.get("torch.distributed")
            if dist is None or not dist.is_initialized():
                return SelfCommunicator()
        return TorchCommunicator(obj)
    if mod.startswith("cupy"):
        return CupyNcclCommunicator(obj)
    raise TypeError(f"comm: expected an mpi4py communicator, a torch.distributed process "
                    f"group, a cupy.cuda.nccl.NcclCommunicator or a kronlinalg Communicator, "
                    f"got {type(obj).__name__}")


def _host_buffer(a):
    """What mpi4py can send: NumPy arrays; torch CPU tensors as their NumPy view."""
    if type(a).__module__.startswith("torch"):
        if a.device.type != "cpu":
            return a  # mpi4py reads __dlpack__ / CUDA array interface where MPI is CUDA-aware
        return a.numpy()
    return a


class MPICommunicator(Communicator):
    name = "mpi4py"

    def __init__(self, comm):
        super().__init__()
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def _exchange(self, sends, recvs):
        self._start(sends, recvs)()

    def _start(self, sends, recvs):
        reqs = [self.comm.Irecv(_host_buffer(b), source=q, tag=_TAG) for q, b in recvs.items()]
        reqs += [self.comm.Isend(_host_buffer(b), dest=p, tag=_TAG) for p, b in sends.items()]
        return lambda: self._MPI.Request.Waitall(reqs)

    def _allreduce(self, buf):
        self.comm.Allreduce(self._MPI.IN_PLACE, _host_buffer(buf), op=self._MPI.SUM)

    def _allgather(self, buf):
        from .comm import empty_like_shape

        out = empty_like_shape(buf, (self.size,) + tuple(buf.shape))
        self.comm.Allgather(_host_buffer(buf), _host_buffer(out))
        return out

    def _barrier(self):
        self.comm.Barrier()

    def _gather_meta(self, vector, timeout):
        out = np.empty((self.size, vector.size), np.int64)
        req = self.comm.Iallgather(vector, out)
        self._wait(req.Test, timeout)
        return out


class TorchCommunicator(Communicator):
    name = "torch.distributed"

    def __init__(self, group=None):
        super().__init__()
        import torch
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))

    def _peer(self, r):
        if self.group is None:
            return r
        return self._dist.get_global_rank(self.group, r)

    def _exchange(self, sends, recvs):
        self._start(sends, recvs)()

    def _start(self, sends, recvs):
        # NCCL runs these on its own stream: the caller's next kernels overlap them, and
        # wait() only orders the caller's stream after them
        dist = self._dist
        ops = [dist.P2POp(dist.irecv, b, self._peer(q), self.group) for q, b in recvs.items()]
        ops += [dist.P2POp(dist.isend, b, self._peer(p), self.group) for p, b in sends.items()]
        works = dist.batch_isend_irecv(ops)

        def finish():
            for work in works:
                work.wait()

        return finish

    def _allreduce(self, buf):
        self._dist.all_reduce(buf, group=self.group)

    def _allgather(self, buf):
        torch = self._torch
        parts = [torch.empty_like(buf) for _ in range(self.size)]
        self._dist.all_gather(parts, buf.contiguous(), group=self.group)
        return torch.stack(parts)

    def _barrier(self):
        self._dist.barrier(group=self.group)

    def _meta_device(self):
        torch = self._torch
        if "nccl" in self.backend:
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _gather_meta(self, vector, timeout):
        torch = self._torch
        dev = self._meta_device()
        t = torch.from_numpy(vector).to(dev)
        parts = [torch.empty_like(t) for _ in range(self.size)]
        work = self._dist.all_gather(parts, t, group=self.group, async_op=True)
        self._wait(work.is_completed, timeout)
        work.wait()
        return torch.stack(parts).cpu().numpy()


class CupyNcclCommunicator(Communicator):
    name = "cupy.cuda.nccl"

    def __init__(self, comm):
        super().__init__()
        from cupy.cuda import nccl

        self._nccl = nccl
        self.comm = comm
        self.rank = comm.rank_id()
        self.size = comm.size()

    @staticmethod
    def _stream():
        import cupy

        return cupy.cuda.get_current_stream()

    def _exchange(self, sends, recvs):
        nccl, s = self._nccl, self._stream().ptr
        nccl.groupStart()
        try:
            for q, b in recvs.items():
                self.comm.recv(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, q, s)
            for p, b in sends.items():
                self.comm.send(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, p, s)
        finally:
            nccl.groupEnd()

    _REDOP_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "float16": "NCCL_FLOAT16",
                    "int64": "NCCL_INT64", "int32": "NCCL_INT32"}

    def _allreduce(self, buf):
        nccl = self._nccl
        dt = getattr(nccl, self._REDOP_TYPES[str(buf.dtype)])
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, dt, nccl.NCCL_SUM,
                            self._stream().ptr)

    def _allgather(self, buf):
        import cupy

        buf = cupy.ascontiguousarray(buf)
        out = cupy.empty((self.size,) + buf.shape, buf.dtype)
        self.comm.allGather(buf.data.ptr, out.data.ptr, buf.nbytes, self._nccl.NCCL_UINT8,
                            self._stream().ptr)
        return out

    def _barrier(self):
        import cupy

        one = cupy.ones(1, cupy.int32)
        self._allreduce(one)
        self._stream().synchronize()

    def _gather_meta(self, vector, timeout):
        import cupy

        stream = self._stream()
        out = self._allgather(cupy.asarray(vector))
        try:
            self._wait(lambda: stream.done, timeout)
        except TimeoutError:
            self.comm.abort()  # the pending collective would block the stream for ever
            raise
        return cupy.asnumpy(out)
