"""A chunk's grouped shares copied into the blocks of ``fast``'s share file.

The copy runs for every share of a ``fast`` run on every server, so it runs compiled
(``_blocks.c``) where the install built the library: numpy pays a few calls per
accumulator and block, about 15 us each, which made the layout cost five times its
copying. :class:`NumpyPlacer` puts the same bytes in the same places where it did not
(a host's pure-Python install, say).

Both are resumable the same way: :meth:`Placer.place` stops when the engine chunk
being made is full, so that its writer can write it (and its schedule line) before a
block of the next one lands; ``state`` says where the chunk's placing stands.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.clients import find_library, load_library

__all__ = ["CompiledPlacer", "NumpyPlacer", "Placer", "compiled_placer", "placer"]

# What ``ltm_blocks_abi()`` returns for the calling convention used here.
_ABI = 1


class Placer(Protocol):
    """The copy of a chunk's shares into blocks, compiled or through numpy: the same bytes."""

    def place(self, src: np.ndarray, counts: np.ndarray, state: np.ndarray,
              held: np.ndarray, carry: np.ndarray, building: np.ndarray, filled: int,
              block_acc: np.ndarray) -> int:
        """Copy the chunk ``src`` (d, slots) of opaque shares, grouped by accumulator
        with ``counts`` (int64) slots each, into ``building`` (R, K, d) from block
        ``filled`` on, noting each block's accumulator in ``block_acc``; an
        accumulator's rows that make no whole block go to its ``carry`` (accs, R, d)
        after the ``held`` (int64) rows already there, which open its next block.
        ``state`` (3 int64, zeros for a new chunk) is where the placing stands. Returns
        the blocks in place: K when the engine chunk is full (call again, with the same
        ``state``, once it is written), less when the chunk is all placed."""


@cache
def _library() -> ctypes.CDLL | None:
    return load_library(
        find_library("_blocks", Path(__file__).resolve().parent), "ltm_blocks_abi", _ABI,
        {"ltm_place_blocks": (ctypes.c_int64, [
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_int64, ctypes.c_void_p])})


def compiled_placer() -> bool:
    """Whether the compiled copy is built here."""
    return _library() is not None


@cache
def placer() -> Placer:
    """The compiled copy where it is built, numpy's where not."""
    lib = _library()
    return CompiledPlacer(lib) if lib is not None else NumpyPlacer()


def _check(src: np.ndarray, counts: np.ndarray, state: np.ndarray, held: np.ndarray,
           carry: np.ndarray, building: np.ndarray, block_acc: np.ndarray) -> None:
    """The C loop trusts its pointers: every shape and type it assumes, checked here."""
    d, slots = src.shape
    R, K, d2 = building.shape
    accs = counts.size
    width = src.dtype.itemsize
    if not (d == d2 and carry.shape == (accs, R, d) and held.shape == (accs,)
            and building.dtype == carry.dtype == src.dtype and block_acc.shape == (K,)
            and state.shape == (3,) and int(counts.sum()) == slots
            and (not accs or int(counts.min()) >= 0)
            and all(a.flags.c_contiguous for a in (src, carry, building))
            and all(a.dtype == np.int64 and a.flags.c_contiguous
                    for a in (counts, state, held, block_acc))
            and width % 8 == 0):
        raise ValueError("a chunk's shares, counts and blocks do not agree in shape")


class CompiledPlacer:
    """The copy of ``_blocks.c``."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._place = lib.ltm_place_blocks

    def place(self, src: np.ndarray, counts: np.ndarray, state: np.ndarray,
              held: np.ndarray, carry: np.ndarray, building: np.ndarray, filled: int,
              block_acc: np.ndarray) -> int:
        _check(src, counts, state, held, carry, building, block_acc)
        d, slots = src.shape
        R, K, _ = building.shape
        return int(self._place(
            src.ctypes.data, d, slots, src.dtype.itemsize, counts.ctypes.data,
            counts.size, state.ctypes.data, held.ctypes.data, carry.ctypes.data, R,
            building.ctypes.data, K, filled, block_acc.ctypes.data))


class NumpyPlacer:
    """The same bytes as :class:`CompiledPlacer`, a few numpy calls per block.

    An accumulator's run is copied, transposed, straight into its blocks' places:
    whole blocks from the run itself (several at once where they are neighbours in
    the engine chunk), the first after the rows carried from earlier chunks.
    """

    def place(self, src: np.ndarray, counts: np.ndarray, state: np.ndarray,
              held: np.ndarray, carry: np.ndarray, building: np.ndarray, filled: int,
              block_acc: np.ndarray) -> int:
        _check(src, counts, state, held, carry, building, block_acc)
        R, K, d = building.shape
        a, first, p = (int(x) for x in state)
        sizes = counts.tolist()
        while a < len(sizes):
            c = sizes[a]
            run = src[:, first:first + c]  # (d, c): this accumulator's rows, by column
            if p == 0:
                h = int(held[a])
                if h + c < R:
                    carry[a, h:h + c] = run.T
                    held[a] = h + c
                    a, first = a + 1, first + c
                    continue
                if h:  # the carried rows, then the run's first, make one block
                    p = R - h
                    building[:h, filled] = carry[a, :h]
                    building[h:, filled] = run[:, :p].T
                    held[a] = 0
                    block_acc[filled] = a
                    filled += 1
                    if filled == K:
                        break
            j = min((c - p) // R, K - filled)
            if j:  # (d, j * R) -> (R, j, d): blocks j side by side in the engine chunk
                building[:, filled:filled + j] = \
                    run[:, p:p + j * R].reshape(d, j, R).transpose(2, 1, 0)
                block_acc[filled:filled + j] = a
                filled += j
                p += j * R
                if filled == K:
                    break
            carry[a, :c - p] = run[:, p:].T
            held[a] = c - p
            a, first, p = a + 1, first + c, 0
        state[:] = (a, first, p)
        return filled
