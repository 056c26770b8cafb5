"""Seeded shares: the helper-seed compression of Prio3 (IETF VDAF draft).

A sharing is a set of *components* that sum to the value: additive sharing
among S servers has S of them (server i holds component i); replicated sharing
has three (server i holds the pair of components i and i-1). With ``--sharing
seeded`` every component but the last is the output of an extendable-output
function (SHAKE128) on a 32-byte seed that the client draws for itself from
``os.urandom``; only the last component, value minus the others, is sent in
full. A server whose components are all seeded receives 32 bytes per client
instead of s * d words, and expands them itself before the MPC starts
(:func:`expand_party`, timed as ``expand_s``).

Each client draws its own seeds, so no server learns anything about another
client's masks, and a server holding one component of a client learns nothing
about the value as long as SHAKE128 is a good pseudorandom generator: seeded
shares hide the data computationally, where full shares (uniform words from
the same kind of CSPRNG, but one word per word) are as close to
information-theoretic as the generator allows.

On remote hosts a server runs ``python -m harness.clients.seeded expand PARTY
PLAN SHARE_FILE`` in its working directory, with the public plan
(:func:`save_plan`) that says where each client's copies go.

The words of a client's component are its s noisy copies' d entries in copy
order (copy i, column t is word i * d + t), placed wherever the public layout
stores that copy; so clients and servers agree on every word without talking.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.clients.layout import Layout
from harness.clients.sharing import ShareFormat, share_format
from harness.fileio import open_private, private_dir, write_private

__all__ = ["SEED_BYTES", "SeededSink", "Components", "components", "expand", "expand_file",
           "expand_party", "main", "save_plan", "upload_dir", "upload_files"]

SEED_BYTES = 32
# Clients expanded at once: bounds the (clients, s * d) buffer at 2^21 words.
_WORDS_PER_BATCH = 1 << 21
# Rows of the full component written at once: no second copy of the whole matrix.
_ROWS_PER_WRITE = 1 << 16


@dataclass(frozen=True)
class Components:
    """Which component each server holds in each word of its shares."""

    count: int
    full: int  # the component clients send in full (value minus the others)
    held: tuple[tuple[int, ...], ...]  # held[i][w]: component in word w of server i

    def seeded(self, party: int) -> list[int]:
        return [c for c in self.held[party] if c != self.full]

    def holds_full(self, party: int) -> bool:
        return self.full in self.held[party]


def components(fmt: ShareFormat, parties: int) -> Components:
    if fmt.words == 1:
        return Components(parties, parties - 1, tuple((i,) for i in range(parties)))
    # Replicated: x = a_0 + a_1 + a_2 and server i holds (a_i, a_{i-1}).
    return Components(3, 2, tuple((i, (i - 1) % 3) for i in range(3)))


def expand(seeds: np.ndarray, words: int) -> np.ndarray:
    """``(clients, words)`` uint64: each client's seed through SHAKE128."""
    out = np.empty((seeds.shape[0], words), dtype=np.uint64)
    raw = out.view(np.uint8)
    size = 8 * words
    for k, seed in enumerate(seeds):
        raw[k] = np.frombuffer(hashlib.shake_128(seed.tobytes()).digest(size), np.uint8)
    return out


def _slot_positions(file_slot: np.ndarray, clients: int, copies: int) -> np.ndarray:
    """(copies, clients): the file row that stores each client's copy."""
    pos = np.full(copies * clients, -1, dtype=np.int64)
    real = np.flatnonzero(file_slot >= 0)
    pos[file_slot[real]] = real
    return pos.reshape(copies, clients)


def _batches(clients: int, copies: int, d: int):
    step = max(1, _WORDS_PER_BATCH // (copies * d))
    for first in range(0, clients, step):
        yield first, min(clients, first + step)


def upload_dir(party_dir: Path) -> Path:
    """Where a server receives seeds and full words before it expands them."""
    return party_dir / "Upload"


def _seed_file(party_dir: Path, component: int) -> Path:
    return upload_dir(party_dir) / f"Seeds-C{component}.bin"


def _full_file(party_dir: Path) -> Path:
    return upload_dir(party_dir) / "Full.data"


def upload_files(party_dir: Path) -> list[Path]:
    """What this server receives from the clients: its seeds, and the full words if it
    holds that component."""
    upload = upload_dir(party_dir)
    return sorted(upload.iterdir()) if upload.is_dir() else []


class SeededSink:
    """The clients' side of seeded sharing, as a sink for :func:`prepare_inputs`.

    Encoded rows arrive in file order and are kept in memory (never written in
    the clear); at :meth:`close` each seeded component's words are subtracted,
    which leaves the full component, and every server gets its seeds and, if it
    holds it, the full component: the real rows only, in file order, since
    padding rows are public zeros that need not travel.
    """

    def __init__(self, party_dirs: list[Path], layout: Layout, fmt: ShareFormat,
                 clients: int, copies: int, d: int) -> None:
        self.party_dirs = party_dirs
        self.layout = layout
        self.comps = components(fmt, len(party_dirs))
        self.clients, self.copies, self.d = clients, copies, d
        self.rows = np.zeros((layout.total_rows, d), dtype=np.uint64)
        self._next = 0
        self.upload_bytes = [0] * len(party_dirs)

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        del real  # padding rows are zero in encoded already, as in every file
        self.rows[self._next:self._next + encoded.shape[0]] = encoded
        self._next += encoded.shape[0]

    def close(self) -> None:
        if self._next != self.layout.total_rows:
            return  # preparation failed half-way: send nothing
        pos = _slot_positions(self.layout.file_slot, self.clients, self.copies)
        n, s, d = self.clients, self.copies, self.d
        for comp in range(self.comps.count):
            if comp == self.comps.full:
                continue
            seeds = np.frombuffer(os.urandom(SEED_BYTES * n), np.uint8).reshape(n, SEED_BYTES)
            for first, last in _batches(n, s, d):
                masks = expand(seeds[first:last], s * d).reshape(last - first, s, d)
                where = pos[:, first:last].T  # (clients, copies)
                self.rows[where] -= masks  # wraps mod 2^64 by design
            for party, held in enumerate(self.comps.held):
                if comp in held:
                    path = _seed_file(self.party_dirs[party], comp)
                    private_dir(path.parent)
                    write_private(path, seeds.tobytes())
                    self.upload_bytes[party] += seeds.nbytes
        real = np.flatnonzero(self.layout.file_slot >= 0)
        for party in range(len(self.party_dirs)):
            if self.comps.holds_full(party):
                path = _full_file(self.party_dirs[party])
                private_dir(path.parent)
                with open_private(path) as fh:
                    for first in range(0, real.size, _ROWS_PER_WRITE):
                        rows = self.rows[real[first:first + _ROWS_PER_WRITE]]
                        fh.write(memoryview(rows).cast("B"))
                self.upload_bytes[party] += 8 * real.size * d
        self.rows = np.empty((0, d), dtype=np.uint64)


def expand_party(party: int, party_dir: Path, share_file: Path, layout: Layout,
                 fmt: ShareFormat, parties: int, clients: int, copies: int) -> float:
    """A server turns what it received into its share file; returns the seconds it took.

    Runs on the server: it reads only its own upload, expands its seeds with
    the public layout, and removes the upload afterwards.
    """
    started = time.perf_counter()
    _expand(party, party_dir, share_file, layout.file_slot, layout.d, fmt, parties, clients,
            copies)
    return time.perf_counter() - started


def save_plan(path: Path, layout: Layout, fmt: ShareFormat, parties: int, clients: int,
              copies: int) -> None:
    """What a server on another host needs of the (public) layout to expand its seeds."""
    slots = layout.file_slot
    # Half the bytes to send when the slots fit, which they do below 2^31 copies.
    if slots.size and int(slots.max()) < 2**31:
        slots = slots.astype(np.int32)
    with open(path, "wb") as fh:
        np.savez(fh, file_slot=slots, d=np.int64(layout.d), format=np.str_(fmt.name),
                 parties=np.int64(parties), clients=np.int64(clients),
                 copies=np.int64(copies))


def expand_file(party: int, plan: Path, share_file: Path, party_dir: Path = Path(".")) -> float:
    """:func:`expand_party` with the plan :func:`save_plan` wrote; seconds, plan read included."""
    started = time.perf_counter()
    with np.load(plan, allow_pickle=False) as data:
        file_slot = data["file_slot"].astype(np.int64)
        d, parties = int(data["d"]), int(data["parties"])
        clients, copies = int(data["clients"]), int(data["copies"])
        fmt = share_format(str(data["format"]))
    _expand(party, party_dir, share_file, file_slot, d, fmt, parties, clients, copies)
    return time.perf_counter() - started


def _expand(party: int, party_dir: Path, share_file: Path, file_slot: np.ndarray, d: int,
            fmt: ShareFormat, parties: int, clients: int, copies: int) -> None:
    comps = components(fmt, parties)
    total_rows = file_slot.shape[0]
    upload = upload_dir(party_dir)
    with open_private(share_file) as fh:
        fh.write(fmt.header)
        fh.truncate(len(fmt.header) + 8 * total_rows * d * fmt.words)
    shares = np.memmap(share_file, dtype="<u8", mode="r+", offset=len(fmt.header),
                       shape=(total_rows, d, fmt.words))
    pos = None
    for word, comp in enumerate(comps.held[party]):
        if comp == comps.full:
            real = np.flatnonzero(file_slot >= 0)
            full = np.memmap(_full_file(party_dir), dtype="<u8", mode="r",
                             shape=(real.size, d))
            for first in range(0, real.size, _ROWS_PER_WRITE):
                rows = real[first:first + _ROWS_PER_WRITE]
                shares[rows, :, word] = full[first:first + _ROWS_PER_WRITE]
            del full
            continue
        if pos is None:
            pos = _slot_positions(file_slot, clients, copies)
        seeds = np.fromfile(_seed_file(party_dir, comp), dtype=np.uint8)
        seeds = seeds.reshape(clients, SEED_BYTES)
        for first, last in _batches(clients, copies, d):
            masks = expand(seeds[first:last], copies * d).reshape(last - first, copies, d)
            shares[pos[:, first:last].T, :, word] = masks
    shares.flush()
    del shares
    for path in upload.iterdir():
        path.unlink()
    upload.rmdir()


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.clients.seeded expand PARTY PLAN SHARE_FILE``, in the server's
    working directory (its upload in ``Upload/``); prints the seconds it took."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] != "expand" or not args[1].isdigit():
        print("usage: python -m harness.clients.seeded expand PARTY PLAN.npz SHARE_FILE",
              file=sys.stderr)
        return 2
    os.umask(0o077)  # the share file is secret from creation
    print(f"expand_s {expand_file(int(args[1]), Path(args[2]), Path(args[3])):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
