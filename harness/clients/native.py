"""The install's compiled loops (``_gaussian.c``, ``_sketch.c``, the stream's ``_blocks.c``),
loaded with ctypes.

The install builds them where it finds a C compiler (``setup.py``: they are optional).
A library is loaded only if it loads on this system and its ABI function returns the
number its Python side speaks: a library built from an older source, or for another
system, is left unloaded, and the caller draws the same values through numpy.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Signature", "find_library", "load_library"]


def find_library(stem: str, here: Path | None = None) -> Path | None:
    """The built library ``stem`` (``_gaussian``, ...) in the package directory ``here``
    (by default this one), if any."""
    here = here or Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"{stem}{suffix}"
        if path.is_file():
            return path
    return None


# A C function's ctypes signature: its result's type (None for void) and its arguments'.
Signature = tuple[Any, list[Any]]


def load_library(path: Path | None, abi_function: str, abi: int,
                 signatures: Mapping[str, Signature] | None = None) -> ctypes.CDLL | None:
    """The library at ``path``, if it loads here and ``abi_function()`` returns ``abi``,
    with each function of ``signatures`` given its result and argument types."""
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path))
        check = getattr(lib, abi_function)
    except (OSError, AttributeError):  # built for another system, or long ago
        return None
    check.restype, check.argtypes = ctypes.c_int, []
    if check() != abi:  # built from an older source: reinstalling rebuilds it
        return None
    for name, (restype, argtypes) in (signatures or {}).items():
        fn = getattr(lib, name)  # present: the ABI number names its functions
        fn.restype, fn.argtypes = restype, argtypes
    return lib
