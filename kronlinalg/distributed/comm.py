"""The communicator interface every distributed algorithm talks to, and the metadata agreement.

A `Communicator` moves device buffers between the ranks of a communicator the user already
has (an mpi4py communicator, a torch.distributed process group, a CuPy NCCL communicator:
``adapters.py``).  The algorithms use only what is here:

- ``exchange(sends, recv_shapes, like)``: grouped point-to-point (an all-to-all-v): each rank
  sends one contiguous array to some peers and receives one from some peers; the sizes are
  known on both sides beforehand (every plan here is computed identically on every rank);
- ``allreduce``, ``allgather``, ``barrier`` and ``agree`` (the metadata check, with a timeout);
- ``bytes_sent``/``messages_sent``: what this rank put on the wire (self-sends are not
  counted), so tests check the communication formulas.
"""

from __future__ import annotations

import hashlib
import math
import time

import numpy as np

__all__ = ["Communicator", "SelfCommunicator", "Pending", "agree", "nbytes", "contiguous", "empty_like_shape",
           "fingerprint", "copy_into", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 60.0  # seconds a rank waits for the others at the metadata agreement
META_LEN = 24  # int64 entries every rank contributes to an agreement


def nbytes(a) -> int:
    """Bytes of an array of any library (torch tensors have no .nbytes before 2.1)."""
    size = math.prod(tuple(a.shape))
    item = a.element_size() if hasattr(a, "element_size") else a.dtype.itemsize
    return int(size * item)


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def contiguous(a):
    """A C-contiguous copy of a (or a itself when it already is one)."""
    if _is_torch(a):
        return a.contiguous()
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy.ascontiguousarray(a)
    return np.ascontiguousarray(a)


def empty_like_shape(like, shape):
    """An uninitialised array of `shape` with like's library, dtype and device."""
    if _is_torch(like):
        import torch

        return torch.empty(tuple(shape), dtype=like.dtype, device=like.device)
    mod = type(like).__module__.split(".")[0]
    if mod == "cupy":
        import cupy

        return cupy.empty(tuple(shape), dtype=like.dtype)
    return np.empty(tuple(shape), dtype=like.dtype)


def copy_into(dst, src) -> None:
    """dst[...] = src for any of the libraries (torch tensors copy_)."""
    if _is_torch(dst):
        dst.copy_(src)
    else:
        dst[...] = src


def fingerprint(arrays) -> int:
    """A 62-bit hash of the arrays' shapes, dtypes and bytes (factors are small: they are
    copied to the host), equal on two ranks exactly when the arrays are bitwise equal."""
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        host = a.detach().cpu().numpy() if _is_torch(a) else (
            a.get() if type(a).__module__.startswith("cupy") else np.asarray(a))
        host = np.ascontiguousarray(host)
        h.update(repr((host.shape, host.dtype.str)).encode())
        h.update(host.tobytes())
    return int.from_bytes(h.digest(), "little") >> 2


class Communicator:
    """rank, size, and the moves of the interface (adapters implement the _underscored ones)."""

    rank: int = 0
    size: int = 1
    name: str = "communicator"

    def __init__(self):
        self.bytes_sent = 0
        self.messages_sent = 0

    def reset_counters(self) -> None:
        self.bytes_sent = 0
        self.messages_sent = 0

    # -- the moves -------------------------------------------------------------------------
    def exchange(self, sends: dict, recv_shapes: dict, like) -> dict:
        """Send sends[p] (contiguous arrays) to each peer p and receive from each peer q in
        recv_shapes an array of shape recv_shapes[q] (like's dtype and device), or into
        recv_shapes[q] itself when that is a contiguous array (a caller's buffer).  Returns
        {q: array}; the piece a rank sends itself is passed through without a copy."""
        return self.exchange_start(sends, recv_shapes, like).wait()

    def exchange_start(self, sends: dict, recv_shapes: dict, like) -> "Pending":
        """exchange() begun: returns a Pending whose wait() gives exchange()'s result.  Where
        the library allows (mpi4py, torch.distributed) the transfer proceeds while the caller
        computes; the send buffers must not change before wait()."""
        out = {}
        remote_sends = {}
        for p, a in sends.items():
            if p == self.rank:
                out[p] = a
            else:
                remote_sends[p] = a
                self.bytes_sent += nbytes(a)
                self.messages_sent += 1
        recvs = {q: (empty_like_shape(like, s) if isinstance(s, tuple) else s)
                 for q, s in recv_shapes.items() if q != self.rank}
        if self.rank in recv_shapes and not isinstance(recv_shapes[self.rank], tuple):
            copy_into(recv_shapes[self.rank], out[self.rank])  # a caller's buffer: fill it
            out[self.rank] = recv_shapes[self.rank]
        finish = self._start(remote_sends, recvs) if (remote_sends or recvs) else None
        out.update(recvs)
        return Pending(out, finish, remote_sends)

    def send(self, buf, dest: int) -> None:
        self.exchange({dest: buf}, {}, buf)

    def recv(self, shape, source: int, like):
        return self.exchange({}, {source: shape}, like)[source]

    def alltoall(self, pieces: list, like) -> list:
        """pieces[p] goes to rank p; every rank sends pieces of the same shapes (by index)."""
        got = self.exchange(dict(enumerate(pieces)),
                            {q: tuple(pieces[self.rank].shape) for q in range(self.size)}, like)
        return [got[q] for q in range(self.size)]

    def allreduce(self, buf):
        """Sum of buf over the ranks, in place (returns buf)."""
        if self.size > 1:
            self._allreduce(buf)
        return buf

    def allgather(self, buf):
        """Array of shape (size, *buf.shape): every rank's buf."""
        return self._allgather(buf)

    def barrier(self) -> None:
        if self.size > 1:
            self._barrier()

    def gather_meta(self, vector: np.ndarray, timeout: float) -> np.ndarray:
        """Host int64 vectors of every rank, shape (size, len); TimeoutError after `timeout`
        seconds when some rank does not take part."""
        if self.size == 1:
            return vector[None, :].copy()
        return self._gather_meta(vector, timeout)

    # -- what an adapter implements ------------------------------------------------------
    def _exchange(self, sends: dict, recvs: dict) -> None:
        raise NotImplementedError

    def _start(self, sends: dict, recvs: dict):
        """Begin the transfers; return a callable that completes them (default: blocking)."""
        self._exchange(sends, recvs)
        return None

    def _allreduce(self, buf) -> None:
        raise NotImplementedError

    def _allgather(self, buf):
        raise NotImplementedError

    def _barrier(self) -> None:
        raise NotImplementedError

    def _gather_meta(self, vector, timeout):
        raise NotImplementedError

    @staticmethod
    def _wait(done, timeout: float) -> None:
        """Poll done() until True; TimeoutError after timeout seconds."""
        deadline = time.monotonic() + timeout
        pause = 1e-5
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(pause)
            pause = min(pause * 2, 1e-2)


class Pending:
    """An exchange under way: wait() completes it and returns {peer: array}."""

    def __init__(self, result: dict, finish, keep):
        self._result, self._finish, self._keep = result, finish, keep

    def wait(self) -> dict:
        if self._finish is not None:
            self._finish()
            self._finish = None
        self._keep = None  # the send buffers may go now
        return self._result


class SelfCommunicator(Communicator):
    """One rank alone (size 1): every algorithm runs without moving data."""

    name = "self"

    def _allgather(self, buf):
        return buf[None, ...]


def agree(comm: Communicator, what: str, fields: dict, timeout: float | None) -> list:
    """Every rank's `fields` (name -> int), gathered before any data moves.

    Returns a list of dicts, one per rank, identical on every rank, so a check on it raises
    the same ValueError everywhere.  A rank that does not arrive within `timeout` seconds (a
    rank missing, or calling another operation) is a ValueError on every rank that did.
    """
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    names = list(fields)
    if len(names) > META_LEN - 1:
        raise ValueError("agree: too many fields")
    vec = np.zeros(META_LEN, np.int64)
    vec[0] = int.from_bytes(hashlib.blake2b(what.encode(), digest_size=7).digest(), "little")
    vec[1:1 + len(names)] = [int(fields[n]) for n in names]
    try:
        table = comm.gather_meta(vec, timeout)
    except TimeoutError:
        raise ValueError(
            f"comm: not every rank of the communicator (size {comm.size}) reached {what} "
            f"within {timeout:g} s: a rank is missing or called another operation; the "
            "communicator is unusable now (abort the job)") from None
    groups = {}
    for r in range(comm.size):
        groups.setdefault(int(table[r, 0]), []).append(r)
    if len(groups) != 1:
        listed = "; ".join(f"ranks {rs}" for rs in sorted(groups.values()))
        raise ValueError(f"comm: the ranks called different operations at {what} (grouped by "
                         f"operation: {listed})")
    return [{n: int(table[r, 1 + i]) for i, n in enumerate(names)} for r in range(comm.size)]
