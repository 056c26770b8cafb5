"""The paper's decomposed sparse sketch S = (1/sqrt s) * sum_i S_i (eq. Ts).

Every S_i in {-1, 0, 1}^{m x n} has exactly one non-zero per column, so the
sketch is stored as two (s, n) arrays: ``rows[i, j]`` is the bucket and
``signs[i, j]`` the sign that component i gives client j. The s non-zeros of a
column sit in distinct rows, a uniformly random s-subset, and each component's
bucket is uniform. The sketch is public: a sparse sketch is a function of (seed, client),
computed per chunk of clients from a counter-based generator (AES-CTR), so runs
can be reproduced, any client's column recomputed, and a billion clients
sketched without ever holding the (s, n) arrays.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from harness.clients.picks import sketch_loops
from harness.errors import InputError
from harness.fileio import write_atomic

__all__ = ["EXPORT_LIMIT", "Sketch", "below", "check_dimensions", "public_words"]


def check_dimensions(n: int, m: int, s: int, *, dense: bool = False) -> None:
    """Reject shapes the mechanism is not defined for, naming the fix."""
    for name, value, flag in (("n", n, "--clients"), ("m", m, "--rows"), ("s", s, "--sparsity")):
        if int(value) != value or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value} (set {flag})")
    if m > n:
        raise InputError(f"the sketch has more rows than there are clients: m={m} > n={n}; "
                         "lower --rows or add clients")
    if s > m:
        raise InputError(f"sparsity s={s} exceeds the number of rows m={m}: each column's "
                         "s non-zeros need distinct rows; lower --sparsity")
    if dense and n % m:
        raise InputError(f"the dense sketch needs m to divide n (n/m non-zeros per row), "
                         f"got n={n}, m={m}; choose --clients as a multiple of --rows")


# Public words per client: one for s = 1 (bucket and sign), else one per non-zero
# (its bucket's draw and its sign; the first also carries the column's shift).
def _words_per_client(s: int) -> int:
    return 1 if s == 1 else s


# Up to this many clients a run on a --data file copies its rows into --out (data.npy,
# 80 MB at n = 1e6 and d = 10); above it the file stays where it is.
EXPORT_LIMIT = 2_000_000
# The counter's last 64-bit word separates the sketch's stream from others keyed by
# the same seed (synthetic data uses 1).
SKETCH_STREAM = 0


def _public_key(seed: int, stream: int) -> bytes:
    # AES-128: the words are public, so the margin of AES-256 buys nothing, and 10
    # rounds instead of 14 make every chunk's sketch and data cheaper.
    return hashlib.sha256(f"ltm-harness public stream {stream}:".encode()
                          + int(seed).to_bytes(16, "little")).digest()[:16]


_ZEROS = bytearray()


def public_words(seed: int, stream: int, first: int, count: int,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Words ``first .. first + count - 1`` of the public stream ``stream`` under ``seed``.

    AES-128 in counter mode under a key hashed from (seed, stream): counter-based,
    so any range is computed directly, without generating what comes before it,
    and a chunk of clients (or one client) costs only its own words, about 1 ns
    each with AES-NI. Public: the sketch and synthetic data are meant to be
    reproducible from the seed; nothing secret is ever drawn from it.
    ``out``: a reused uint64 buffer of at least ``count + 3`` words.
    """
    # Loaded here: ``ltm run``'s own process draws no sketch (its clients do).
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    global _ZEROS
    block, skip = divmod(first, 2)  # two words per 16-byte AES block
    nbytes = 8 * (skip + count)
    if len(_ZEROS) < nbytes:
        _ZEROS = bytearray(nbytes)
    if out is None or out.size < count + 3:
        out = np.empty(count + 3, dtype=np.uint64)
    cipher = Cipher(algorithms.AES(_public_key(seed, stream)),
                    modes.CTR((block % 2**128).to_bytes(16, "big"))).encryptor()
    cipher.update_into(memoryview(_ZEROS)[:nbytes], out.view(np.uint8)[: nbytes + 16].data)
    return out[skip: skip + count]


def below(words: np.ndarray, bound: np.ndarray | int) -> np.ndarray:
    """Map uniform 64-bit words to [0, bound) by the high half of a 32x32 product.

    Lemire's multiply-shift without rejection: each value's probability is off by
    at most bound / 2^32 (2.3e-8 at m = 100), irrelevant for a public sketch and
    the price of a fixed number of words per client.
    """
    low = words & np.uint64(0xFFFFFFFF)
    return ((low * np.asarray(bound, dtype=np.uint64)) >> np.uint64(32)).astype(np.int32)


@dataclass(frozen=True)
class Sketch:
    """A public sketch: explicit (s, n) arrays, or a function of (seed, client).

    Sparse sketches are counter-based: client j's buckets and signs are computed
    from public words ``j * w .. j * w + w - 1`` under the key ``seed``, so
    :meth:`columns` gives any range of clients in O(range) time and memory and
    the sketch of a billion clients is never held. ``rows`` and ``signs``
    materialise it (for small n: analyses, exports, the file-based programs).
    Dense sketches and loaded ones hold their arrays.
    """

    m: int
    _rows: np.ndarray | None = None
    _signs: np.ndarray | None = None
    count: int = 0  # n, for a counter-based sketch
    sparsity: int = 1  # s, for a counter-based sketch
    seed: int | None = None  # what the public stream of a counter-based sketch is keyed by
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def counter_based(self) -> bool:
        return self._rows is None

    @property
    def s(self) -> int:
        return self.sparsity if self._rows is None else int(self._rows.shape[0])

    @property
    def n(self) -> int:
        return self.count if self._rows is None else int(self._rows.shape[1])

    @property
    def dense(self) -> bool:
        return self.s == self.m

    @property
    def rows(self) -> np.ndarray:
        """(s, n) bucket of client j in component i (materialised once if counter-based)."""
        return self._arrays()[0]

    @property
    def signs(self) -> np.ndarray:
        """(s, n) sign, +1 or -1, of client j in component i."""
        return self._arrays()[1]

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._rows is not None:
            assert self._signs is not None
            return self._rows, self._signs
        if "arrays" not in self._cache:
            self._cache["arrays"] = self.columns(0, self.n)
        return self._cache["arrays"]

    def columns(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Buckets (s, k) int32 and signs (s, k) int8 of clients [start, stop)."""
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"clients [{start}, {stop}) are not in [0, {self.n})")
        if self._rows is not None:
            assert self._signs is not None
            return self._rows[:, start:stop], self._signs[:, start:stop]
        assert self.seed is not None
        s, k = self.s, stop - start
        w = _words_per_client(s)
        words = public_words(self.seed, SKETCH_STREAM, start * w, k * w).reshape(k, w)
        if s == 1:
            rows = below(words[:, 0], self.m)[None, :]
            signs = _sign_bits(words[:, 0])[None, :]
            return rows, signs
        picks = sketch_loops().picks(words, self.m, s)
        return picks.astype(np.int32), _sign_bits(words.T)

    def accumulators(self, start: int, stop: int) -> np.ndarray:
        """Each slot's accumulator among clients [start, stop), in slot order (component
        i, then client j), as int64: the bucket, plus m for sign -1.

        What servers recompute for every chunk they sum, so s = 1 takes a short path
        straight from the public words (the same bucket and sign :meth:`columns` gives).
        """
        if self._rows is not None:
            rows, signs = self.columns(start, stop)
            return (rows.astype(np.int64) + self.m * (signs < 0)).ravel()
        assert self.seed is not None
        s, k = self.s, stop - start
        words = public_words(self.seed, SKETCH_STREAM, start * _words_per_client(s),
                             k * _words_per_client(s))
        if s > 1:
            loops = sketch_loops()
            return loops.picks(words.reshape(k, s), self.m, s, accumulators=True).ravel()
        acc = words >> np.uint64(63)  # a top bit of 0 is sign -1 (see _sign_bits)
        acc ^= np.uint64(1)
        acc *= np.uint64(self.m)
        words &= np.uint64(0xFFFFFFFF)
        words *= np.uint64(self.m)
        words >>= np.uint64(32)
        acc += words
        return acc.view(np.int64)

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Client j's s buckets and signs, computed from the seed alone."""
        rows, signs = self.columns(j, j + 1)
        return rows[:, 0], signs[:, 0]

    @classmethod
    def sparse(cls, n: int, m: int, s: int, seed: int | None = None) -> Sketch:
        """s non-zeros per column in distinct, uniformly random rows, counter-based.

        Without a seed one is drawn from ``os.urandom`` and kept in :attr:`seed`,
        so the sketch can still be recomputed (and is recorded with the run).
        """
        check_dimensions(n, m, s)
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        return cls(m, count=n, sparsity=s, seed=int(seed))

    @classmethod
    def dense_sketch(cls, n: int, m: int, seed: int | None = None) -> Sketch:
        """s = m: every column hits every row; each S_i has n/m non-zeros per row.

        Columns are split at random into n/m groups of m; within a group the
        components use a random Latin square, whose rows (components) and
        columns (clients) are both permutations of the m buckets.
        """
        check_dimensions(n, m, m, dense=True)
        rng = np.random.default_rng(seed)
        groups = n // m
        clients = rng.permutation(n).reshape(groups, m)
        # L[g, i, k] = pi3_g[(pi1_g[i] + pi2_g[k]) mod m]: a random Latin square per group
        pi1 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        pi2 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        pi3 = rng.permuted(np.tile(np.arange(m), (groups, 1)), axis=1)
        square = (pi1[:, :, None] + pi2[:, None, :]) % m
        square = np.take_along_axis(pi3[:, :, None], square.reshape(groups, -1, 1), axis=1)
        square = square.reshape(groups, m, m)  # [group, component, position in group]
        rows = np.empty((m, n), dtype=np.int32)
        rows[:, clients.reshape(-1)] = square.transpose(1, 0, 2).reshape(m, n)
        return cls(m, rows, _signs(rng, (m, n)))

    @classmethod
    def generate(cls, n: int, m: int, s: int, seed: int | None = None,
                 dense: bool = False) -> Sketch:
        if dense:
            if s not in (m, None):
                raise InputError(f"the dense sketch has sparsity s = m = {m}, got s={s}")
            return cls.dense_sketch(n, m, seed)
        return cls.sparse(n, m, s, seed)

    def matrix(self) -> np.ndarray:
        """The (m, n) matrix sqrt(s) * S = sum_i S_i, for small checks only."""
        out = np.zeros((self.m, self.n), dtype=np.int64)
        cols = np.arange(self.n)
        for i in range(self.s):
            np.add.at(out, (self.rows[i], cols), self.signs[i])
        return out

    def apply(self, copies: np.ndarray) -> np.ndarray:
        """sum_i S_i X_i for copies X of shape (s, n, d), without the 1/sqrt(s) factor."""
        s, n, d = copies.shape
        if (s, n) != self.rows.shape:
            raise InputError(f"copies have shape {copies.shape}, the sketch needs ({self.s}, "
                             f"{self.n}, d)")
        out = np.zeros((self.m, d), dtype=np.result_type(copies.dtype, np.int8))
        for i in range(s):
            np.add.at(out, self.rows[i], copies[i] * self.signs[i][:, None].astype(out.dtype))
        return out

    def save(self, path: str | os.PathLike) -> None:
        write_atomic(path, lambda fh: np.savez(fh, rows=self.rows, signs=self.signs,
                                               m=np.int64(self.m)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Sketch:
        try:
            with np.load(path) as data:
                rows = data["rows"].astype(np.int32)
                signs = data["signs"].astype(np.int8)
                m = int(data["m"]) if "m" in data else int(rows.max()) + 1
        except (OSError, KeyError, ValueError) as exc:
            raise InputError(f"cannot read sketch {path}: {exc}") from exc
        sk = cls(m, rows, signs)
        sk.validate()
        return sk

    def validate(self) -> None:
        if self.rows.ndim != 2 or self.rows.shape != self.signs.shape:
            raise InputError("sketch arrays rows and signs must both have shape (s, n)")
        if self.rows.size and (self.rows.min() < 0 or self.rows.max() >= self.m):
            raise InputError(f"sketch rows must lie in [0, {self.m})")
        if not np.isin(self.signs, (-1, 1)).all():
            raise InputError("sketch signs must be +1 or -1")
        if self.s > 1:
            ordered = np.sort(self.rows, axis=0)
            if (ordered[1:] == ordered[:-1]).any():
                raise InputError("a column of the sketch repeats a row; its s non-zeros "
                                 "must sit in distinct rows")


def _signs(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return (rng.integers(0, 2, size=shape, dtype=np.int8) * 2 - 1).astype(np.int8)


def _sign_bits(words: np.ndarray) -> np.ndarray:
    """+1 or -1 from each word's top bit (the bucket used its low half)."""
    signs = (words >> np.uint64(63)).astype(np.int8)
    signs *= 2
    signs -= 1
    return signs
