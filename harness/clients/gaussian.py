"""A worker's Gaussian noise on the lattice, drawn and added in one compiled pass.

The draws are numpy's: ``_gaussian.c`` is ``Generator.standard_normal``'s ziggurat
(its tables, its wedge and its tail, step for step) over the words of the run's
CSPRNG (:func:`~harness.privacy.noise_rng`, randomgen's ``AESCounter``), which
:class:`AesWords` computes in bulk, one cipher call for a block's words, instead of
a call into the generator per word. The same generator state gives the same
normals, bit for bit, and leaves the generator where numpy would: the noise is what
the accountant certifies, whichever draws it. Each draw is scaled to lattice steps,
rounded on its own and added to its client's encoded entry as an integer, as
:meth:`~harness.privacy.NoiseSpec.sample_lattice` does, in one loop over a block
that stays in the core's cache, where numpy makes a pass per step.

The library is built by the install (``setup.py``; a C compiler is optional). Where
it is missing, :func:`gaussian_noise` gives :class:`NumpyGaussian`, the same steps
through numpy: the same values, about twice the time.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from harness.clients.native import find_library, load_library

if TYPE_CHECKING:
    from randomgen import AESCounter

__all__ = ["AesWords", "BlockNoise", "GaussianNoise", "LatticeGaussian", "NumpyGaussian",
           "compiled_gaussian", "gaussian_noise", "vector_gaussian"]


# What ``ltm_gaussian_abi()`` returns for the calling convention used here.
_ABI = 4

# Words computed beyond one per draw: size >> SPARE_SHIFT, plus SPARE_WORDS.
SPARE_SHIFT, SPARE_WORDS = 4, 64


@cache
def _library() -> ctypes.CDLL | None:
    return _load(find_library("_gaussian"))


def _load(path: Path | None) -> ctypes.CDLL | None:
    """The library at ``path``, if it loads here and speaks this module's convention."""
    return load_library(path, "ltm_gaussian_abi", _ABI, {
        "ltm_add_gaussian": (ctypes.c_int64, [
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_double,
            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
            ctypes.c_void_p, ctypes.c_void_p]),
        "ltm_gaussian_vector": (ctypes.c_int, [ctypes.c_int])})


def compiled_gaussian() -> bool:
    """Whether the compiled sampler is built here."""
    return _library() is not None


def vector_gaussian(use: bool | None = None) -> bool:
    """Whether the compiled sampler takes its fast path four words at a time (AVX2,
    where the CPU has it); ``use`` turns that off, or back on (the tests draw both
    ways). The draws are the same either way."""
    lib = _library()
    if lib is None:
        return False
    return bool(lib.ltm_gaussian_vector(-1 if use is None else int(use)))


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

    @property
    def path(self) -> str:
        """How the draws are made, for the run's record: ``compiled, four draws at a
        time``, ``compiled, one draw at a time`` or ``numpy`` (the same values)."""

    def add(self, data: np.ndarray, clients: np.ndarray, out: np.ndarray) -> BlockNoise:
        """``out[j] = data[clients[j]] + rint(sigma * z_j)`` (int64, mod 2^64; ``data``
        holds integers as float64, ``clients`` indexes it), each z_j the generator's next
        standard normal."""


def gaussian_noise(sigma: float, rng: np.random.Generator) -> GaussianNoise:
    """The compiled loop where it is built (and reads the generator), numpy's passes
    where not: the same draws."""
    if compiled_gaussian() and AesWords.reads(rng.bit_generator):
        return LatticeGaussian(sigma, cast("AESCounter", rng.bit_generator))
    return NumpyGaussian(sigma, rng)


def _place(state: Mapping[str, Any]) -> tuple[bytes, int]:
    """An AESCounter's key, as AES-128 takes it, and how many words it has given."""
    s = state["s"]
    key = int(s["seed"][0]) | int(s["seed"][1]) << 64
    # Its buffer holds the four blocks before ``counter``; ``offset`` bytes are used.
    return key.to_bytes(16, "little"), 2 * int(s["counter"][0]) - (64 - int(s["offset"])) // 8


class AesWords:
    """The words an ``AESCounter`` gives from its current place, computed in bulk.

    randomgen's ``AESCounter(key)`` yields AES-128 under ``key`` (little-endian bytes)
    of the blocks 0, 1, 2, ... (128-bit little-endian counters), read as little-endian
    64-bit words. OpenSSL's counter mode counts big-endian, so the blocks are
    encrypted one by one (ECB over explicit counters): the same keystream, at the
    cipher's bulk speed. :meth:`take` then moves ``source`` on as far as the words
    used, so it stays where numpy's draws would have left it.
    """

    def __init__(self, source: AESCounter) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        if not self.reads(source):
            raise TypeError("AesWords reads randomgen's AESCounter as it keeps its state; "
                            f"this generator is {source.state.get('bit_generator')}, or "
                            "keeps it otherwise")
        key, self.pos = _place(source.state)
        self.cipher = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        self.source = source
        self._blocks = np.zeros((0, 2), dtype=np.uint64)
        self._stream = np.empty(0, dtype=np.uint8)
        self._iota = np.empty(0, dtype=np.uint64)

    @staticmethod
    def reads(source: np.random.BitGenerator) -> bool:
        """Whether ``source`` is an AESCounter whose next word is the one computed
        here (checked on a copy: another version of randomgen might keep its state
        otherwise, and would then be drawn through numpy)."""
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        state = source.state
        if state.get("bit_generator") != "randomgen.aes.AESCounter":
            return False
        try:
            key, pos = _place(state)
            probe = type(source)()
            probe.state = state
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        block = np.zeros(2, dtype=np.uint64)
        block[0] = pos // 2
        word = np.frombuffer(Cipher(algorithms.AES(key), modes.ECB()).encryptor()
                             .update(block.tobytes()), dtype=np.uint64)[pos % 2]
        return bool(probe.random_raw() == word)

    def words(self, count: int) -> np.ndarray:
        """The next ``count`` words, from the current place (not yet taken)."""
        first, skip = divmod(self.pos, 2)
        blocks = (skip + count + 1) // 2
        if blocks > self._blocks.shape[0]:
            self._blocks = np.zeros((blocks, 2), dtype=np.uint64)
            self._stream = np.empty(16 * blocks + 16, dtype=np.uint8)
            self._iota = np.arange(blocks, dtype=np.uint64)
        counters = self._blocks[:blocks]
        np.add(self._iota[:blocks], np.uint64(first), out=counters[:, 0])
        self.cipher.update_into(counters.data.cast("B"), self._stream.data)
        return self._stream[: 16 * blocks].view(np.uint64)[skip: skip + count]

    def take(self, used: int) -> None:
        """``used`` of the words were drawn: the place, and the generator, move on."""
        self.pos += used
        self.source.advance(used)


class LatticeGaussian:
    """Gaussian noise of ``sigma`` lattice steps from ``source``, rounded to the
    lattice and added to encoded entries: what ``Generator(source).standard_normal``
    would draw, scaled and rounded as :meth:`~harness.privacy.NoiseSpec.sample_lattice`
    does. Needs the compiled library (:func:`compiled_gaussian`) and an
    ``AESCounter`` (:func:`~harness.privacy.noise_rng`'s)."""

    def __init__(self, sigma: float, source: AESCounter) -> None:
        lib = _library()
        if lib is None:
            raise RuntimeError("the compiled Gaussian sampler is not built; reinstall the "
                               "harness with a C compiler (pip install -e .)")
        self._add = lib.ltm_add_gaussian
        self.sigma = float(sigma)
        self._words = AesWords(source)
        self._used = ctypes.c_int64()
        self._acc = np.zeros(4)

    @property
    def path(self) -> str:
        return ("compiled, four draws at a time" if vector_gaussian()
                else "compiled, one draw at a time")

    def add(self, data: np.ndarray, clients: np.ndarray, out: np.ndarray) -> BlockNoise:
        # The library reads raw memory: the types and layouts are checked here, each
        # index there (a pass over them first, in cache, before any word is drawn).
        if not (data.dtype == np.float64 and clients.dtype == np.int64
                and out.dtype == np.int64 and clients.shape == out.shape
                and data.flags.c_contiguous and clients.flags.c_contiguous
                and out.flags.c_contiguous and out.flags.writeable):
            raise TypeError("LatticeGaussian.add needs contiguous float64 data and int64 "
                            "clients and out of one length")
        acc, used, words = self._acc, self._used, self._words
        acc[:] = 0.0
        done, size = 0, out.size
        # A draw takes one word, or a few where it falls in the wedge or the tail (about
        # one in 80): a few more words than draws nearly always finish the block in one
        # round. Words left over are not taken (the next round computes them again), so
        # no draw is ever skipped.
        spare = (size >> SPARE_SHIFT) + SPARE_WORDS
        while done < size:
            left = size - done
            want = left + spare
            made = self._add(words.words(want).ctypes.data, want, ctypes.byref(used),
                             self.sigma, data.ctypes.data, data.size,
                             clients.ctypes.data + 8 * done, left,
                             out.ctypes.data + 8 * done, acc.ctypes.data)
            if made < 0:
                raise IndexError("a client index lies outside the block's entries")
            words.take(used.value)
            done += made
            if not made:  # one draw needed more words than were spare
                spare = 2 * spare + 8
        return BlockNoise(float(acc[0]), float(acc[1]), float(acc[2]), float(acc[3]))


class NumpyGaussian:
    """The same draws and sums as :class:`LatticeGaussian`, a numpy pass per step."""

    path = "numpy"

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
