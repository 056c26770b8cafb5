"""The sketch's per-slot loops: a column's s distinct buckets, a chunk's grouping.

Both run for every slot of a run with s > 1, twice (the clients draw the sketch to
group their slots, and the servers in turn to check the grouping), so they run
compiled (``_sketch.c``) where the install built the library: one loop per client
where numpy makes a pass per step over thousands of clients. :class:`NumpyLoops`
gives the same integers, bit for bit, where it did not.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.clients.native import find_library, load_library

__all__ = ["CompiledLoops", "NumpyLoops", "SketchLoops", "compiled_sketch", "sketch_loops"]

# What ``ltm_sketch_abi()`` returns for the calling convention used here.
_ABI = 1

# Columns per pass of numpy's Floyd: its "taken" table is (columns, m) booleans,
# 256 KiB, which a core's L2 cache holds while the s steps look it up at random
# (at 16 MiB the draw took 15 % longer).
_FLOYD_CELLS = 1 << 18


class SketchLoops(Protocol):
    """The two loops, compiled or through numpy: the same results."""

    def picks(self, words: np.ndarray, m: int, s: int, accumulators: bool = False
              ) -> np.ndarray:
        """For each row of ``words`` (k, s) uint64: s distinct buckets of [m], as an
        (s, k) int64 (with ``accumulators``, each plus m where its sign is -1).

        Floyd's algorithm: step t draws from [0, m-s+t] (the low half of word t) and
        takes the top value on a clash, which yields a uniform s-subset from exactly s
        words. Floyd's steps are not exchangeable (the last step's clash value m - 1
        comes last too often), so the subset is then shifted cyclically by a uniform
        amount from bits 32-62 of word 0: a bijection of s-subsets, so still uniform,
        and it makes every component's bucket uniform. Which component holds which of
        a column's buckets does not matter beyond that: the s noisy copies a client
        sends are identically distributed. A bucket's sign is its word's top bit.
        """

    def groups(self, acc: np.ndarray, accs: int, clients: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """A chunk's slots (copy i of client j at ``i * clients + j``; ``acc`` their
        accumulators, in [0, accs)) grouped by accumulator, stably: the client of each
        grouped slot, and the slot counts per accumulator (int64)."""


@cache
def _library() -> ctypes.CDLL | None:
    return _load(find_library("_sketch"))


def _load(path: Path | None) -> ctypes.CDLL | None:
    return load_library(path, "ltm_sketch_abi", _ABI, {
        "ltm_distinct_picks": (None, [ctypes.c_void_p] + [ctypes.c_int64] * 3
                               + [ctypes.c_int] + [ctypes.c_void_p] * 3),
        "ltm_group_slots": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_int64] * 3
                            + [ctypes.c_void_p] * 2)})


def compiled_sketch() -> bool:
    """Whether the compiled loops are built here."""
    return _library() is not None


@cache
def sketch_loops() -> SketchLoops:
    """The compiled loops where they are built, numpy's passes where not."""
    lib = _library()
    return CompiledLoops(lib) if lib is not None else NumpyLoops()


def _check_picks(words: np.ndarray, m: int, s: int) -> None:
    if not (words.ndim == 2 and words.shape[1] == s and words.dtype == np.uint64):
        raise TypeError(f"the sketch's words must be (k, {s}) uint64, got "
                        f"{words.shape} {words.dtype}")
    if not 1 <= s <= m < 2**32:
        raise ValueError(f"cannot draw {s} distinct buckets of {m}")


def _check_groups(acc: np.ndarray, clients: int) -> int:
    """The copies per client (acc holds ``clients`` slots per copy)."""
    if acc.ndim != 1 or acc.dtype.kind not in "iu" or clients < 0 \
            or (acc.size % clients if clients else acc.size):
        raise TypeError(f"a chunk's accumulators must be a flat integer array of whole "
                        f"copies of {clients} clients, got {acc.shape} {acc.dtype}")
    return acc.size // clients if clients else 0


class CompiledLoops:
    """The loops of ``_sketch.c``."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._picks, self._groups = lib.ltm_distinct_picks, lib.ltm_group_slots

    def picks(self, words: np.ndarray, m: int, s: int, accumulators: bool = False
              ) -> np.ndarray:
        _check_picks(words, m, s)
        words = np.ascontiguousarray(words)
        k = words.shape[0]
        out = np.empty((s, k), dtype=np.int64)
        taken = np.zeros(m, dtype=np.uint8)
        local = np.empty(s, dtype=np.int64)
        self._picks(words.ctypes.data, k, s, m, int(accumulators), taken.ctypes.data,
                    local.ctypes.data, out.ctypes.data)
        return out

    def groups(self, acc: np.ndarray, accs: int, clients: int
               ) -> tuple[np.ndarray, np.ndarray]:
        s = _check_groups(acc, clients)
        acc = np.ascontiguousarray(acc, dtype=np.int64)
        counts = np.empty(accs, dtype=np.int64)
        order = np.empty(acc.size, dtype=np.int64)
        if self._groups(acc.ctypes.data, s, clients, accs, counts.ctypes.data,
                        order.ctypes.data):
            raise ValueError(f"a chunk's accumulator lies outside [0, {accs})")
        return order, counts


class NumpyLoops:
    """The same results as :class:`CompiledLoops`, a numpy pass per step."""

    def picks(self, words: np.ndarray, m: int, s: int, accumulators: bool = False
              ) -> np.ndarray:
        _check_picks(words, m, s)
        k = words.shape[0]
        picks = np.empty((s, k), dtype=np.int64)
        tops = np.arange(m - s + 1, m + 1, dtype=np.uint64)[:, None]
        per_pass = max(1, _FLOYD_CELLS // m)
        for first in range(0, k, per_pass):
            # (s, count), a copy: at s = 1 the transpose is contiguous, and a view would
            # let the sign's steps below write into the caller's words.
            part = np.array(words[first:first + per_pass].T, order="C")
            count = part.shape[1]
            draws = part & np.uint64(0xFFFFFFFF)
            draws *= tops
            draws >>= np.uint64(32)
            chosen = draws.view(np.int64)
            base = np.arange(0, count * m, m, dtype=np.int64)  # row starts of "taken"
            taken = np.zeros(count * m, dtype=bool)
            cell = np.empty(count, dtype=np.int64)
            clash = np.empty(count, dtype=bool)
            for step in range(s):
                pick = chosen[step]
                np.add(base, pick, out=cell)
                np.take(taken, cell, out=clash)
                np.putmask(pick, clash, m - s + step)
                np.add(base, pick, out=cell)
                taken[cell] = True
            shift = (part[0] >> np.uint64(32)) & np.uint64(0x7FFFFFFF)
            shift *= np.uint64(m)
            shift >>= np.uint64(31)
            chosen += shift.view(np.int64)
            chosen -= (chosen >= m) * m
            if accumulators:
                part >>= np.uint64(63)  # a top bit of 0 is sign -1
                part ^= np.uint64(1)
                part *= np.uint64(m)
                chosen += part.view(np.int64)
            if count == k:
                return chosen
            picks[:, first:first + count] = chosen
        return picks

    def groups(self, acc: np.ndarray, accs: int, clients: int
               ) -> tuple[np.ndarray, np.ndarray]:
        _check_groups(acc, clients)
        if acc.size and (int(acc.min()) < 0 or int(acc.max()) >= accs):
            raise ValueError(f"a chunk's accumulator lies outside [0, {accs})")
        # numpy's stable sort of a 16-bit type is a radix sort: O(slots), not
        # O(slots log slots).
        small = acc.astype(np.int16) if accs <= 2**15 else acc
        order = np.argsort(small, kind="stable")
        if acc.size > clients:  # s > 1: slot i * clients + j is client j's i-th
            order %= clients
        return order, np.bincount(small, minlength=accs)
