"""The seeded components' generator: cryptographic PRGs keyed by a 32-byte seed,
one fresh seed per client, microseconds per client.

Seeded sharing expands one seed per client and seeded component into that
client's s * d words (:mod:`harness.clients.seeded`), so what counts is the
cost per client at 10 to 500 words, per-call set-up included, not the bulk
rate. Candidates, all cryptographic (a non-cryptographic generator such as PCG
or Philox would let a server predict the masks):

- shake128: ``hashlib.shake_128(seed).digest(8 w)``;
- aes-ctr-crypto, chacha20-crypto: the ``cryptography`` package, one cipher
  object per seed (AES-256-CTR, ChaCha20 with a zero nonce);
- aes-ctr-libcrypto: AES-256-CTR through the system's libcrypto over ctypes,
  one context re-keyed per seed (what ``keystream.expand`` uses);
- chacha20-libcrypto: the same with ChaCha20.

Each is run over the same clients, interleaved, best of ``--repeat``.

    python -m benchmarks.prg [--clients N] [--repeat K] [--words W ...] [--json FILE]
                             [--smoke]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from benchmarks._cli import parse_arguments
from harness.clients import libcrypto

_IV = bytes(16)
# The smallest size (--smoke): in seconds.
SMOKE = {"clients": 200, "repeat": 1, "words": [10, 50]}


def _shake(seeds: np.ndarray, out: np.ndarray) -> None:
    rows, size = out.view(np.uint8), 8 * out.shape[1]
    for k, seed in enumerate(seeds):
        rows[k] = np.frombuffer(hashlib.shake_128(seed.tobytes()).digest(size), np.uint8)


def _crypto(make):
    def run(seeds: np.ndarray, out: np.ndarray) -> None:
        rows, zeros = out.view(np.uint8), bytes(8 * out.shape[1])
        for k, seed in enumerate(seeds):
            rows[k] = np.frombuffer(Cipher(*make(seed.tobytes())).encryptor().update(zeros),
                                    np.uint8)
    return run


def _libcrypto_cipher(name: str):
    lib = libcrypto()
    if lib is None:
        return None
    getter = getattr(lib, name)
    getter.restype, getter.argtypes = ctypes.c_void_p, []

    def run(seeds: np.ndarray, out: np.ndarray) -> None:
        size, zeros = 8 * out.shape[1], bytes(8 * out.shape[1])
        written = ctypes.c_int()
        ctx = lib.EVP_CIPHER_CTX_new()
        try:
            lib.EVP_EncryptInit_ex(ctx, getter(), None, None, _IV)
            for k in range(seeds.shape[0]):
                lib.EVP_EncryptInit_ex(ctx, None, None, seeds.ctypes.data + 32 * k, _IV)
                lib.EVP_EncryptUpdate(ctx, out.ctypes.data + size * k, ctypes.byref(written),
                                      zeros, size)
        finally:
            lib.EVP_CIPHER_CTX_free(ctx)
    return run


def measure(clients: int, repeat: int, words: list[int]) -> dict[int, dict[str, float]]:
    candidates = {
        "shake128": _shake,
        "aes-ctr-crypto": _crypto(lambda key: (algorithms.AES(key), modes.CTR(_IV))),
        "chacha20-crypto": _crypto(lambda key: (algorithms.ChaCha20(key, _IV), None)),
        "aes-ctr-libcrypto": _libcrypto_cipher("EVP_aes_256_ctr"),
        "chacha20-libcrypto": _libcrypto_cipher("EVP_chacha20"),
    }
    candidates = {k: v for k, v in candidates.items() if v is not None}
    seeds = np.frombuffer(os.urandom(32 * clients), np.uint8).reshape(clients, 32)
    table = {}
    for w in words:
        out = np.empty((clients, w), np.uint64)
        best = dict.fromkeys(candidates, float("inf"))
        for _ in range(repeat):
            for name, run in candidates.items():
                started = time.perf_counter()
                run(seeds, out)
                best[name] = min(best[name], time.perf_counter() - started)
        table[w] = {name: 1e6 * t / clients for name, t in best.items()}
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prg",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--words", type=int, nargs="+", default=[10, 50, 100, 500])
    parser.add_argument("--json", type=Path, help="also write the table here (microseconds "
                                                   "per client, by words and generator)")
    args = parse_arguments(parser, argv, SMOKE)
    if args.json is not None and args.json.exists():
        print(f"benchmarks.prg: error: {args.json} exists; not overwriting it", file=sys.stderr)
        return 1
    if args.clients < 1 or args.repeat < 1 or min(args.words) < 1:
        print("benchmarks.prg: error: --clients, --repeat and --words must be positive",
              file=sys.stderr)
        return 1
    table = measure(args.clients, args.repeat, args.words)
    names = list(next(iter(table.values())))
    print("| words | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for w, row in table.items():
        print(f"| {w} | " + " | ".join(f"{row[n]:.1f}" for n in names) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"clients": args.clients, "repeat": args.repeat,
                                         "us_per_client": {str(w): row
                                                           for w, row in table.items()}},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
