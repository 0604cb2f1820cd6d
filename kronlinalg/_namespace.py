"""``kronlinalg.namespace(x)``: the caller's array namespace with our functions in ``linalg``."""

from __future__ import annotations

import types

import array_api_compat

_cache: dict[int, "types.ModuleType"] = {}


class _Extended(types.ModuleType):
    """A module that answers our names first and passes every other name to `base`."""

    def __init__(self, name, base, extra):
        super().__init__(name)
        self._base = base
        self.__dict__.update(extra)

    def __getattr__(self, name):
        return getattr(self._base, name)

    def __dir__(self):
        return sorted(set(dir(self._base)) | set(self.__dict__))


def namespace(x_or_namespace, /):
    """Return the array namespace of an array (or a namespace) with ``linalg`` extended.

    ``xp = kronlinalg.namespace(x)`` behaves as ``array_api_compat.array_namespace(x)`` except that
    ``xp.linalg`` also has kronlinalg's functions (``kron_matmul``, ``kron``,
    ``structured_matmul``, ``strassen_matmul``, ``batched_matmul``, ``matmul``) and ``xp.matmul``
    / ``xp.linalg.matmul`` are routed by the cost model (``kronlinalg.matmul``); every other
    name passes through.
    """
    import kronlinalg as kl

    obj = x_or_namespace
    if isinstance(obj, types.ModuleType):
        base = obj
        if not hasattr(base, "__array_api_version__"):
            try:  # plain numpy / torch / cupy module: use its array-API wrapper
                base = array_api_compat.array_namespace(base.asarray([0.0]))
            except Exception:
                raise TypeError(
                    f"x_or_namespace: {obj.__name__} is not an array namespace"
                ) from None
    else:
        try:
            base = array_api_compat.array_namespace(obj)
        except TypeError:
            raise TypeError(
                f"x_or_namespace: expected an array or an array namespace, got {type(obj).__name__}"
            ) from None
    key = id(base)
    if key not in _cache:
        linalg = _Extended(
            f"kronlinalg.namespace({base.__name__}).linalg",
            getattr(base, "linalg", types.ModuleType("linalg")),
            {"kron_matmul": kl.kron_matmul, "kron": kl.kron,
             "structured_matmul": kl.structured_matmul, "strassen_matmul": kl.strassen_matmul,
             "batched_matmul": kl.batched_matmul, "matmul": kl.matmul},
        )
        _cache[key] = _Extended(f"kronlinalg.namespace({base.__name__})", base,
                                {"linalg": linalg, "matmul": kl.matmul})
    return _cache[key]
