"""Run small forwards on one BLAS thread (best effort, OpenBLAS only).

A query is 10-40 tokens: its matrix products are too small for two BLAS threads to pay off,
and on a busy machine OpenBLAS's spinning worker thread made a single query 5-10x slower
(measured p50 560-640 ms with two threads against 60-110 ms with one at load average 9, by the
issue 17 study). :func:`one_blas_thread` lowers OpenBLAS's thread count for the duration of a
call and restores it afterwards. The setting is process-wide in OpenBLAS, so callers hold a lock
around it (the encoder's forward lock); with another BLAS (MKL, Accelerate) or no OpenBLAS found
it does nothing. The library handle is looked up on first use, never at import.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["one_blas_thread"]

_SETTERS = ("openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local64_")
_LOCK = threading.Lock()
_SETTER: Any = None
_RESOLVED = False


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux ``/proc/self/maps``)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    paths = {line.split()[-1] for line in lines if "openblas" in line.rsplit("/", 1)[-1].lower()}
    return sorted(p for p in paths if p.startswith("/"))


def _setter() -> Any:
    global _SETTER, _RESOLVED
    with _LOCK:
        if not _RESOLVED:
            _RESOLVED = True
            import numpy  # noqa: F401  (maps numpy's OpenBLAS before the lookup)

            for path in _loaded_openblas():
                try:
                    lib = ctypes.CDLL(path)
                except OSError:
                    continue
                for name in _SETTERS:
                    fn = getattr(lib, name, None)
                    if fn is not None:
                        fn.argtypes = [ctypes.c_int]
                        fn.restype = ctypes.c_int
                        _SETTER = fn
                        return _SETTER
        return _SETTER


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Use one OpenBLAS thread inside the block, then restore the previous count."""
    setter = _setter()
    if setter is None:
        yield
        return
    previous = int(setter(1))
    try:
        yield
    finally:
        setter(max(previous, 1))
