"""The seeded components' generator: AES-256-CTR keystreams keyed by 32-byte seeds.

A seeded component's words are the AES-256-CTR keystream under its
seed (the key), the counter starting at zero: a fresh key per stream, so the
fixed starting counter is safe. Candidates, all cryptographic PRGs (a
non-cryptographic generator such as PCG or Philox would let a server predict
masks), measured with ``python -m benchmarks.prg`` on this 2-core machine at
load average 7-8, microseconds per client (per-call set-up included), best of
3 over 20,000 clients, w = s * d words per client:

======  ========  ==============  ===============  =================  ==================
w       SHAKE128  AES-CTR (pkg)   ChaCha20 (pkg)   AES-CTR libcrypto  ChaCha20 libcrypto
======  ========  ==============  ===============  =================  ==================
10      10.8      88.5            55.4             23.6               20.8
50      13.5      80.2            55.1             34.3               26.4
100     15.0      76.0            49.8             21.6               20.2
500     44.9      82.6            43.7             19.8               19.7
======  ========  ==============  ===============  =================  ==================

(SHAKE128: ``hashlib``; "pkg": the ``cryptography`` package, one cipher
object per seed, whose set-up costs 40-90 us here; libcrypto: the system's,
through ctypes, one context re-keyed per seed.) A second run a minute later:
SHAKE128 9.3, 8.8, 17.2, 40.2 us; AES-CTR libcrypto 24.6, 23.5, 13.8, 17.7 us;
ChaCha20 libcrypto 19.1, 27.1, 22.0, 20.1 us. At a quieter moment a first
version of the same loops gave AES-256-CTR through libcrypto 14, 8.6, 7.1 and
8.7 us at w = 10, 50, 100 and 500, SHAKE128 8.5, 9.2, 11.1 and 24.5 us.
SHAKE128 wins below about 100 words, where a client's expansion costs a few
microseconds either way; AES-256-CTR through libcrypto wins where expansion
costs time, at large s (2.3-2.8x at w = 500, Table 5's s = 50 cell), and runs
without the GIL, so two threads expand at once. It is the one used; ChaCha20
through libcrypto is within noise of it, and AES-256-CTR is already what full
shares' masks come from (:mod:`harness.clients.sharing`). Where libcrypto
cannot be loaded (or gives a different keystream, checked once) the same
AES-256-CTR keystream comes from ``cryptography``, slower, bit for bit the
same, so clients and servers always agree.

:func:`libcrypto` is that checked handle (``None`` where it cannot be used),
for ``benchmarks.prg`` too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any

import numpy as np

__all__ = ["SEED_BYTES", "expand", "libcrypto"]

SEED_BYTES = 32
# Each seed keys its own stream, so every stream may start at counter zero.
_NONCE = bytes(16)

_lib_lock = threading.Lock()
_lib: list[Any] = []  # [the libcrypto handle, or None where it cannot be used]


def libcrypto() -> Any:
    """The system's libcrypto through ctypes, once checked to give :func:`expand`'s
    keystream; ``None`` where it cannot be loaded or differs."""
    with _lib_lock:
        if not _lib:
            _lib.append(_load_libcrypto())
        return _lib[0]


def _load_libcrypto() -> Any:
    try:
        try:
            lib = ctypes.CDLL("libcrypto.so.3")  # the one Python's ssl has loaded already
        except OSError:
            lib = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so")
        vp = ctypes.c_void_p
        lib.EVP_CIPHER_CTX_new.restype = vp
        lib.EVP_CIPHER_CTX_new.argtypes = []
        lib.EVP_CIPHER_CTX_free.argtypes = [vp]
        lib.EVP_aes_256_ctr.restype = vp
        lib.EVP_aes_256_ctr.argtypes = []
        lib.EVP_EncryptInit_ex.argtypes = [vp, vp, vp, vp, ctypes.c_char_p]
        lib.EVP_EncryptUpdate.argtypes = [vp, vp, vp, ctypes.c_char_p, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    # Servers and clients must agree on every word: use it only if it is the same stream.
    probe = np.frombuffer(bytes(range(SEED_BYTES)) * 2, np.uint8).reshape(2, SEED_BYTES)
    ours, theirs = np.empty((2, 37), np.uint64), np.empty((2, 37), np.uint64)
    try:
        _aes_ctr_ctypes(lib, probe, ours, np.arange(2))
    except (OSError, RuntimeError):
        return None
    _aes_ctr_cryptography(probe, theirs, np.arange(2))
    return lib if np.array_equal(ours, theirs) else None


def _aes_ctr_ctypes(lib: Any, seeds: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
    size = 8 * out.shape[1]
    zeros = bytes(size)
    seeds = np.ascontiguousarray(seeds)
    key, base = seeds.ctypes.data, out.ctypes.data
    written = ctypes.c_int()
    where = ctypes.byref(written)
    init, update = lib.EVP_EncryptInit_ex, lib.EVP_EncryptUpdate
    ctx = lib.EVP_CIPHER_CTX_new()
    if not ctx:
        raise RuntimeError("EVP_CIPHER_CTX_new failed")
    try:
        if init(ctx, lib.EVP_aes_256_ctr(), None, None, _NONCE) != 1:
            raise RuntimeError("EVP_EncryptInit_ex failed")
        for k, row in enumerate(rows.tolist()):
            if init(ctx, None, None, key + SEED_BYTES * k, _NONCE) != 1 \
                    or update(ctx, base + size * row, where, zeros, size) != 1:
                raise RuntimeError("AES-256-CTR failed in libcrypto")
    finally:
        lib.EVP_CIPHER_CTX_free(ctx)


def _aes_ctr_cryptography(seeds: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    zeros = bytes(8 * out.shape[1])
    raw = out.view(np.uint8)
    for k, row in enumerate(rows.tolist()):
        stream = Cipher(algorithms.AES(seeds[k].tobytes()), modes.CTR(_NONCE)).encryptor()
        raw[row] = np.frombuffer(stream.update(zeros), np.uint8)


# Below this many seeds a second thread costs more than it saves.
_SEEDS_PER_THREAD = 4096


def expand(seeds: np.ndarray, words: int, out: np.ndarray | None = None,
           rows: np.ndarray | None = None) -> np.ndarray:
    """Each client's AES-256-CTR keystream under its seed, ``words`` uint64 words: seed k's
    into row ``rows[k]`` of ``out`` (default: row k of a new ``(clients, words)`` array)."""
    if rows is None:
        rows = np.arange(seeds.shape[0])
    if out is None:
        out = np.empty((seeds.shape[0], words), dtype=np.uint64)
    assert out.shape[1] == words and out.dtype == np.uint64 and out.flags.c_contiguous
    assert rows.shape == (seeds.shape[0],) and (not rows.size or 0 <= rows.min() <= rows.max()
                                                < out.shape[0])
    lib = libcrypto()
    if lib is None:
        _aes_ctr_cryptography(seeds, out, rows)
        return out
    # libcrypto runs without the GIL: on two cores, two threads expand twice as fast.
    threads = min(os.cpu_count() or 1, 2, max(1, seeds.shape[0] // _SEEDS_PER_THREAD))
    if threads == 1:
        _aes_ctr_ctypes(lib, seeds, out, rows)
        return out
    cut = seeds.shape[0] // 2
    errors: list[BaseException] = []

    def run_helper() -> None:
        try:
            _aes_ctr_ctypes(lib, seeds[cut:], out, rows[cut:])
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
    helper = threading.Thread(target=run_helper)
    helper.start()
    try:
        _aes_ctr_ctypes(lib, seeds[:cut], out, rows[:cut])
    finally:
        helper.join()
    if errors:
        raise errors[0]
    return out
