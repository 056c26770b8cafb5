"""A worker's Gaussian noise on the lattice, drawn and added in one compiled pass.

The draws are numpy's: ``_gaussian.c`` is ``Generator.standard_normal``'s ziggurat
(its tables, its wedge and its tail, step for step), calling the run's CSPRNG
(:func:`~harness.clients.noise_rng`) through the same function pointers numpy
calls. The same generator state gives the same normals, bit for bit, and leaves
the generator where numpy would: the noise is what the accountant certifies,
whichever draws it. Each draw is scaled to lattice steps, rounded on its own and
added to its client's encoded entry as an integer, as
:meth:`~harness.clients.NoiseSpec.sample_lattice` does, in one loop over a block
that stays in the core's cache, where numpy makes a pass per step.

The library is built by the install (``setup.py``; a C compiler is optional). Where
it is missing, :func:`gaussian_noise` gives :class:`NumpyGaussian`, the same steps
through numpy: the same values, about twice the time.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = ["BlockNoise", "GaussianNoise", "LatticeGaussian", "NumpyGaussian",
           "compiled_gaussian", "gaussian_noise"]


# What ``ltm_gaussian_abi()`` returns for the calling convention used here.
_ABI = 2


@cache
def _library() -> ctypes.CDLL | None:
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_gaussian{suffix}"
        if path.is_file():
            return _load(path)
    return None


def _load(path: Path) -> ctypes.CDLL | None:
    """The library at ``path``, if it loads here and speaks this module's convention."""
    try:
        lib = ctypes.CDLL(str(path))
        abi = lib.ltm_gaussian_abi
    except (OSError, AttributeError):  # built for another system, or long ago
        return None
    abi.restype, abi.argtypes = ctypes.c_int, []
    if abi() != _ABI:  # built from an older source: reinstalling rebuilds it
        return None
    fn = lib.ltm_add_gaussian
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_double] + \
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
         ctypes.c_void_p, ctypes.c_void_p]
    return lib


def compiled_gaussian() -> bool:
    """Whether the compiled sampler is built here."""
    return _library() is not None


@dataclass
class BlockNoise:
    """A block's noise as released, in lattice steps, and its largest value."""

    sum: float
    sum_sq: float
    max_step: float  # the largest |noise|
    max_value: float  # the largest |value| written (meaningless if a sum wrapped)


class GaussianNoise(Protocol):
    """A client worker's Gaussian noise of ``sigma`` lattice steps, block by block."""

    sigma: float

    def add(self, data: np.ndarray, clients: np.ndarray, out: np.ndarray) -> BlockNoise:
        """``out[j] = data[clients[j]] + rint(sigma * z_j)`` (int64, mod 2^64; ``data``
        holds integers as float64, ``clients`` indexes it), each z_j the generator's next
        standard normal."""


def gaussian_noise(sigma: float, rng: np.random.Generator) -> GaussianNoise:
    """The compiled loop where it is built, numpy's passes where not: the same draws."""
    if compiled_gaussian():
        return LatticeGaussian(sigma, rng.bit_generator)
    return NumpyGaussian(sigma, rng)


class LatticeGaussian:
    """Gaussian noise of ``sigma`` lattice steps from ``source``, rounded to the
    lattice and added to encoded entries: what ``Generator(source).standard_normal``
    would draw, scaled and rounded as :meth:`~harness.clients.NoiseSpec.sample_lattice`
    does. Needs the compiled library (:func:`compiled_gaussian`)."""

    def __init__(self, sigma: float, source: np.random.BitGenerator) -> None:
        lib = _library()
        if lib is None:
            raise RuntimeError("the compiled Gaussian sampler is not built; reinstall the "
                               "harness with a C compiler (pip install -e .)")
        self._add = lib.ltm_add_gaussian
        self.sigma = float(sigma)
        # Kept alive: the library calls into its state, without the generator's lock
        # (numpy takes it; a client worker has one thread, and this is its generator).
        self._source = source
        pointers = source.ctypes
        self._state = pointers.state_address
        self._next64 = ctypes.cast(pointers.next_uint64, ctypes.c_void_p).value
        self._next_double = ctypes.cast(pointers.next_double, ctypes.c_void_p).value
        self._acc = np.zeros(4)

    def add(self, data: np.ndarray, clients: np.ndarray, out: np.ndarray) -> BlockNoise:
        # The library reads raw memory: the types and layouts are checked here, each
        # index there (a pass over them first, in cache, before any word is drawn).
        if not (data.dtype == np.float64 and clients.dtype == np.int64
                and out.dtype == np.int64 and clients.shape == out.shape
                and data.flags.c_contiguous and clients.flags.c_contiguous
                and out.flags.c_contiguous and out.flags.writeable):
            raise TypeError("LatticeGaussian.add needs contiguous float64 data and int64 "
                            "clients and out of one length")
        acc = self._acc
        acc[:] = 0.0
        if self._add(self._state, self._next64, self._next_double, self.sigma,
                     data.ctypes.data, data.size, clients.ctypes.data, out.size,
                     out.ctypes.data, acc.ctypes.data):
            raise IndexError("a client index lies outside the block's entries")
        return BlockNoise(float(acc[0]), float(acc[1]), float(acc[2]), float(acc[3]))


class NumpyGaussian:
    """The same draws and sums as :class:`LatticeGaussian`, a numpy pass per step."""

    def __init__(self, sigma: float, rng: np.random.Generator) -> None:
        self.sigma, self.rng = float(sigma), rng
        self._steps = self._values = np.empty(0)

    def add(self, data: np.ndarray, clients: np.ndarray, out: np.ndarray) -> BlockNoise:
        size = clients.size
        if size > self._steps.size:
            self._steps, self._values = np.empty(size), np.empty(size)
        values, steps = self._values[:size], self._steps[:size]
        # mode="clip": with "raise" numpy copies through a buffer to be safe from a bad
        # index; these are a permutation's.
        np.take(data, clients, out=values, mode="clip")
        self.rng.standard_normal(out=steps)
        steps *= self.sigma
        np.rint(steps, out=steps)
        # Entries and steps are integers: as int64, so that no sum is rounded.
        np.copyto(out, values, casting="unsafe")
        out += steps.astype(np.int64)
        if not size:
            return BlockNoise(0.0, 0.0, 0.0, 0.0)
        # No BLAS threads for the sum of squares: the cores are busy.
        return BlockNoise(float(steps.sum()), float(np.einsum("i,i->", steps, steps)),
                          float(np.abs(steps).max()), max(float(out.max()), -float(out.min())))
