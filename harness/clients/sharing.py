"""Secret sharing over Z_2^64, in each MP-SPDZ protocol's own share format.

Masks come from a CSPRNG: the AES-256-CTR keystream under a key of 32 bytes
from ``os.urandom``, fresh for every call, so no key is ever reused and none
is derived from ``--seed``. A seeded generator would let anyone who learns the
seed reconstruct every input. AES-CTR is used instead of ``os.urandom`` for
the bulk because it is about ten times faster here (3 vs 0.2-0.4 GB/s with
AES-NI), and its output is indistinguishable from random as long as AES is a
pseudorandom permutation, the same assumption the kernel's generator rests on.

Two sharings, and the share files MP-SPDZ reads them from
(``Persistence/Transactions-P<i>.data``: an 8-byte little-endian length, the
descriptor, the 4-byte exponent 64, then the shares):

- additive (semi2k, ``Z2^64``): x = a_0 + ... + a_{S-1}; party i stores a_i,
  one 8-byte word per share;
- replicated (three parties; ``replicated Z2^64`` for replicated-ring and
  ps-rep-ring, ``malicious replicated Z2^64`` for malicious-rep-ring):
  x = a_0 + a_1 + a_2 and party i stores the pair (a_i, a_{i-1}), two words per
  share. Each a_k is held by two parties, so a malicious protocol can check a
  party's words against its neighbour's copy when it opens a value.

spdz2k has no format here on purpose: its share files carry MACs under a key
that no client knows, so clients cannot write them (see
:mod:`harness.engine.protocols`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

__all__ = ["ADDITIVE", "FORMATS", "MALICIOUS_REPLICATED", "REPLICATED", "ShareFormat",
           "random_ring", "replicate", "share", "share_format"]

_PIECE = 1 << 20  # bytes of keystream per call into the cipher
_ZEROS_VIEW = memoryview(bytes(_PIECE))
_SLACK = 15  # update_into wants room for a block beyond the data


def random_ring(shape: tuple[int, ...]) -> np.ndarray:
    """Uniform uint64 words of ``shape`` from a freshly keyed AES-256-CTR keystream."""
    # Loaded here: ``ltm run``'s own process shares nothing (its clients do).
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    count = int(np.prod(shape))
    size = 8 * count
    out = np.empty(size + _SLACK, dtype=np.uint8)
    # A fresh key per call makes a zero counter block safe: no (key, counter) repeats.
    stream = Cipher(algorithms.AES(os.urandom(32)), modes.CTR(bytes(16))).encryptor()
    view = out.data
    for start in range(0, size, _PIECE):
        piece = min(_PIECE, size - start)
        stream.update_into(_ZEROS_VIEW[:piece], view[start:start + piece + _SLACK])
    return out[:size].view(np.uint64).reshape(shape)


def share(values: np.ndarray, parties: int,
          masks: np.ndarray | None = None) -> list[np.ndarray]:
    """Split uint64 ``values`` into ``parties`` arrays that sum to them mod 2^64.

    Any parties - 1 of the shares are independent and uniformly random.
    ``masks`` (parties - 1 arrays of ``values``' shape from :func:`random_ring`)
    lets a caller draw them ahead, e.g. in a thread while it computes the values.
    """
    if parties < 2:
        raise ValueError("additive sharing needs at least two parties")
    values = np.asarray(values, dtype=np.uint64)
    if masks is None:
        masks = random_ring((parties - 1, *values.shape))
    elif masks.shape != (parties - 1, *values.shape) or masks.dtype != np.uint64:
        raise ValueError(f"masks must be uint64 of shape {(parties - 1, *values.shape)}")
    last = values.copy()
    for mask in masks:
        last -= mask  # wraps mod 2^64 by design
    return [*masks, last]


def replicate(values: np.ndarray, masks: np.ndarray | None = None) -> list[np.ndarray]:
    """Replicated shares of uint64 ``values`` for three parties: party i gets (a_i, a_{i-1}).

    Each result has ``values``' shape plus a last axis of 2. Any single party's
    pair is two independent uniform words, whatever the values.
    """
    a = share(values, 3, masks)
    return [np.stack([a[i], a[i - 1]], axis=-1) for i in range(3)]


@dataclass(frozen=True)
class ShareFormat:
    """How one protocol's share files look and how a client splits a value for them."""

    name: str
    descriptor: bytes  # MP-SPDZ's type string, before the exponent
    words: int  # 8-byte words per share
    parties: int | None = None  # the only party count the sharing supports, if any

    @property
    def header(self) -> bytes:
        body = self.descriptor + struct.pack("<I", 64)
        return struct.pack("<Q", len(body)) + body

    def split(self, values: np.ndarray, parties: int,
              masks: np.ndarray | None = None) -> list[np.ndarray]:
        """Every party's shares of ``values``: shape ``values.shape`` (+ (words,) if > 1)."""
        if self.words == 1:
            return share(values, parties, masks)
        if parties != 3:
            raise ValueError(f"{self.name} sharing is for exactly 3 parties, not {parties}")
        return replicate(values, masks)


ADDITIVE = ShareFormat("additive", b"Z2^64", 1)
REPLICATED = ShareFormat("replicated", b"replicated Z2^64", 2, parties=3)
MALICIOUS_REPLICATED = ShareFormat("malicious replicated", b"malicious replicated Z2^64", 2,
                                   parties=3)

FORMATS = {f.name: f for f in (ADDITIVE, REPLICATED, MALICIOUS_REPLICATED)}


def share_format(name: str) -> ShareFormat:
    """The format called ``name``, as a plan written for another host names it."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown share format {name!r}; known: {', '.join(FORMATS)}") from None
