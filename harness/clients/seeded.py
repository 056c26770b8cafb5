"""Seeded shares: the helper-seed compression of Prio3 (IETF VDAF draft).

A sharing is a set of C *components* that sum to the value: additive sharing
among S servers has C = S of them (server i holds component i); replicated
sharing has C = 3 (server i holds the pair of components i and i-1). With
``--sharing seeded`` client j sends one component, c_j = j mod C, in full
(value minus the others) and every other component as a 32-byte seed that it
draws for itself from ``os.urandom``; a server expands the seeds it receives
itself before the MPC starts (:func:`expand_party`, timed as ``expand_s``).
This is Prio3's helper-seed idea with the "leader" spread over the servers: who
leads for client j is public, so every server receives the full words of about
1/C of the clients and seeds for the rest, about 1/S of the full-sharing bytes
each at S = 3 (additive: 8 s d n/3 + 64 n/3 bytes against 8 s d n; replicated:
server i gets full words for the 2n/3 clients that lead with component i or i-1,
one word each, against two words for every client), so each server's inbound
link, which limits the upload, carries a third as much. With one fixed leader
that server received as much as with full sharing.

Security is that of one fixed leader, client by client: for each client a
server holds, per component it holds, either that component's seed or its full
words, and the full component is the value minus C-1 independent pseudorandom
components, so it is pseudorandom by itself. Any S-1 servers (additive) or any
one server (replicated) miss at least one component of every client, which
masks the value; their view is pseudorandom as long as the generator is a good
PRG. Seeds are drawn per client and per component, so no server learns
anything about another client's masks. Seeded shares hide the data
computationally, where full shares (uniform words from a CSPRNG, one word per
word) are as close to information-theoretic as the generator allows. The
generator, a component's words under its seed, is AES-256-CTR
(:mod:`harness.clients.keystream`, which says why).

A streamed run (``local`` on this machine) sends the same components a chunk of
clients at a time, with no file: :mod:`harness.clients.stream_seeded`.

On remote hosts a server runs ``python -m harness.remote.agent expand PARTY
PLAN SHARE_FILE`` (:func:`expand_file`) in its working directory, with the
public plan (:func:`save_plan`) that says where each client's copies go.

The words of a client's component are its s noisy copies' d entries in copy
order (copy i, column t is word i * d + t), placed wherever the public layout
stores that copy; so clients and servers agree on every word without talking.
A server's upload, per component c it holds: ``Seeds-C{c}.bin``, the seeds of
the clients j with j mod C != c in client order, and ``Full-C{c}.data``, the
real rows (never the public zero padding) of the clients with j mod C = c in
file order.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.clients.keystream import SEED_BYTES, expand
from harness.clients.layout import Layout
from harness.clients.sharing import ShareFormat, share_format
from harness.fileio import open_private, private_dir, write_private

__all__ = ["SEED_BYTES", "SeededSink", "Components", "components", "expand", "expand_file",
           "expand_party", "save_plan", "upload_dir", "upload_files"]

# Clients' keystreams held at once on the client side before they are summed.
_WORDS_PER_BATCH = 1 << 21
# Encoded rows a client side holds while its masks are drawn: beyond this it waits,
# so that peak memory stays the masks' plus this.
_PENDING_BYTES = 256 << 20
# Rows of a share file built and written at once: no second copy of the whole matrix.
_ROWS_PER_WRITE = 1 << 16


@dataclass(frozen=True)
class Components:
    """Which component each server holds in each word of its shares; client j sends
    component j mod ``count`` in full and the others as seeds."""

    count: int
    held: tuple[tuple[int, ...], ...]  # held[i][w]: component in word w of server i

    def full_clients(self, comp: int, clients: int) -> int:
        """How many clients send ``comp`` in full."""
        return len(range(comp, clients, self.count))

    def seeded_mask(self, comp: int, clients: int) -> np.ndarray:
        """Which clients send ``comp`` as a seed."""
        return np.arange(clients) % self.count != comp

    def upload_bytes(self, party: int, clients: int, words_per_client: int) -> int:
        """What server ``party`` receives: per component it holds, seeds and full words."""
        return sum(SEED_BYTES * (clients - self.full_clients(c, clients))
                   + 8 * words_per_client * self.full_clients(c, clients)
                   for c in self.held[party])


def components(fmt: ShareFormat, parties: int) -> Components:
    if fmt.words == 1:
        return Components(parties, tuple((i,) for i in range(parties)))
    # Replicated: x = a_0 + a_1 + a_2 and server i holds (a_i, a_{i-1}).
    return Components(3, tuple((i, (i - 1) % 3) for i in range(3)))


def _client_batches(clients: int, words: int):
    step = max(1, _WORDS_PER_BATCH // max(1, words))
    for first in range(0, clients, step):
        yield first, min(clients, first + step)


# --- files -------------------------------------------------------------------------------

def upload_dir(party_dir: Path) -> Path:
    """Where a server receives seeds and full words before it expands them."""
    return party_dir / "Upload"


def _seed_file(party_dir: Path, component: int) -> Path:
    return upload_dir(party_dir) / f"Seeds-C{component}.bin"


def _full_file(party_dir: Path, component: int) -> Path:
    return upload_dir(party_dir) / f"Full-C{component}.data"


def upload_files(party_dir: Path) -> list[Path]:
    """What this server receives from the clients: per component it holds, its seeds
    and its full words."""
    upload = upload_dir(party_dir)
    return sorted(upload.iterdir()) if upload.is_dir() else []


# --- the clients -------------------------------------------------------------------------

class SeededSink:
    """The clients' side of seeded sharing, as a sink for :func:`prepare_inputs`.

    When preparation starts (:meth:`start`), a thread draws every client's seeds
    and sums its seeded components' keystreams (copy-ordered, one row per
    client and copy). Encoded rows then arrive in file order (held, until the
    masks are in, so that noise and encoding run on meanwhile) and are never
    written in the clear: each chunk's real rows are split by their client's
    full component, their masks gathered and subtracted, and the result
    appended to that component's full file at every server holding it. Padding
    rows are public zeros and are not sent. The seed files are written at
    :meth:`close`, only if every row came; a half-done preparation sends nothing.
    """

    def __init__(self, party_dirs: list[Path], layout: Layout, fmt: ShareFormat,
                 clients: int, copies: int, d: int) -> None:
        self.party_dirs = party_dirs
        self.layout = layout
        self.comps = components(fmt, len(party_dirs))
        self.clients, self.copies, self.d = clients, copies, d
        self.holders = [[p for p, held in enumerate(self.comps.held) if c in held]
                        for c in range(self.comps.count)]
        self.upload_bytes = [0] * len(party_dirs)
        self._next = 0
        self._pool: ThreadPoolExecutor | None = None
        self._drawing: Future | None = None
        self._seeds: np.ndarray | None = None
        self._masks: np.ndarray | None = None
        self._files: list[list] = []
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._received = 0

    def start(self) -> None:
        """Draw the seeds and their masks in the background (preparation's clock runs)."""
        if self._drawing is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seeds")
            self._drawing = self._pool.submit(self._draw)

    def _draw(self) -> tuple[np.ndarray, np.ndarray]:
        n, s, d, count = self.clients, self.copies, self.d, self.comps.count
        words = s * d
        # seeds[j, k]: client j's k-th seeded component, in component order without j mod C
        seeds = np.frombuffer(os.urandom(SEED_BYTES * n * (count - 1)), np.uint8)
        seeds = seeds.reshape(n, count - 1, SEED_BYTES)
        masks = np.empty((n, words), dtype=np.uint64)
        for first, last in _client_batches(n, words * (count - 1)):
            streams = expand(seeds[first:last].reshape(-1, SEED_BYTES), words)
            streams = streams.reshape(last - first, count - 1, words)
            np.sum(streams, axis=1, dtype=np.uint64, out=masks[first:last])  # mod 2^64
        return seeds, masks.reshape(n * s, d)

    def _open(self) -> None:
        for c in range(self.comps.count):
            files = []
            for party in self.holders[c]:
                path = _full_file(self.party_dirs[party], c)
                private_dir(path.parent)
                files.append(open_private(path))
            self._files.append(files)

    def write(self, encoded: np.ndarray, real: np.ndarray) -> None:
        self._received += encoded.shape[0]
        if self._masks is None:
            self.start()
            assert self._drawing is not None
            held = sum(rows.nbytes for rows, _ in self._pending) + encoded.nbytes
            if not self._drawing.done() and held <= _PENDING_BYTES:
                # Held until the masks are drawn, so noise and encoding run on meanwhile.
                self._pending.append((encoded, real))
                return
            self._seeds, self._masks = self._drawing.result()
            self._open()
        while self._pending:
            self._share(*self._pending.pop(0))
        self._share(encoded, real)

    def _share(self, encoded: np.ndarray, real: np.ndarray) -> None:
        n, s, count = self.clients, self.copies, self.comps.count
        assert self._masks is not None  # drawn before any row is shared
        rows = encoded.shape[0]
        slots = self.layout.file_slot[self._next:self._next + rows]
        self._next += rows
        # Real rows grouped by the component their client sends in full (file order kept
        # within each), with one gather of rows and one of masks; padding rows are dropped.
        lead = (slots % n % count).astype(np.int8)
        lead[~real] = count
        order = np.argsort(lead, kind="stable")
        ends = np.cumsum(np.bincount(lead, minlength=count + 1))
        order = order[:ends[count - 1]]
        slot = slots[order]
        full = np.take(self._masks, (slot % n) * s + slot // n, axis=0)
        np.subtract(np.take(encoded, order, axis=0), full, out=full)  # mod 2^64 by design
        for c in range(count):
            part = full[ends[c - 1] if c else 0:ends[c]].data.cast("B")
            for party, fh in zip(self.holders[c], self._files[c], strict=True):
                fh.write(part)
                self.upload_bytes[party] += part.nbytes

    def close(self) -> None:
        failed = None
        try:
            if self._pending and self._received == self.layout.total_rows:
                assert self._drawing is not None
                self._seeds, self._masks = self._drawing.result()
                self._open()
                while self._pending:
                    self._share(*self._pending.pop(0))
        except BaseException as exc:  # after the clean-up below: nothing half-written stays
            failed = exc
        self._pending = []
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for files in self._files:
            for fh in files:
                fh.close()
        done = self._seeds is not None and self._next == self.layout.total_rows
        if not done:
            for c, _ in enumerate(self._files):  # preparation failed half-way: send nothing
                for party in self.holders[c]:
                    _full_file(self.party_dirs[party], c).unlink(missing_ok=True)
            self._masks = self._seeds = None
            if failed is not None:
                raise failed
            return
        assert self._seeds is not None
        lead = np.arange(self.clients) % self.comps.count
        for c in range(self.comps.count):
            seeded = np.flatnonzero(lead != c)
            # c's place among client j's seeded components, which skip j mod C
            k = np.where(c < lead[seeded], c, c - 1)
            seeds = np.ascontiguousarray(self._seeds[seeded, k])
            for party in self.holders[c]:
                path = _seed_file(self.party_dirs[party], c)
                private_dir(path.parent)
                write_private(path, seeds.tobytes())
                self.upload_bytes[party] += seeds.nbytes
        self._masks = self._seeds = None


# --- the servers -------------------------------------------------------------------------

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
    count, held = comps.count, comps.held[party]
    n, s = clients, copies
    # Per held component, its seeded clients' masks in client order (the rows of the
    # clients that send it in full stay unwritten), so that the share file can be
    # written in file order with one gather per chunk.
    masks = []
    for c in held:
        seeds = np.fromfile(_seed_file(party_dir, c), dtype=np.uint8).reshape(-1, SEED_BYTES)
        seeded = np.flatnonzero(comps.seeded_mask(c, n))
        if seeds.shape[0] != seeded.size:
            raise ValueError(f"{_seed_file(party_dir, c)} holds {seeds.shape[0]} seeds, "
                             f"not {seeded.size}")
        mask = np.empty((n, s * d), dtype=np.uint64)
        expand(seeds, s * d, out=mask, rows=seeded)
        masks.append(mask.reshape(-1, d))
    with ExitStack() as stack:
        fulls = [stack.enter_context(open(_full_file(party_dir, c), "rb")) for c in held]
        with open_private(share_file) as out:
            out.write(fmt.header)
            for first in range(0, file_slot.shape[0], _ROWS_PER_WRITE):
                slots = file_slot[first:first + _ROWS_PER_WRITE]
                copy = slots // n
                client = slots - copy * n
                rows = client * s + copy  # a padding row's is a real row's, zeroed below
                padding = slots < 0
                lead = np.where(padding, count, client % count)
                parts = []
                for w, c in enumerate(held):
                    part = np.take(masks[w], rows, axis=0)
                    leads = lead == c
                    k = int(np.count_nonzero(leads))
                    raw = fulls[w].read(8 * d * k)
                    if len(raw) != 8 * d * k:
                        raise ValueError(f"{_full_file(party_dir, c)} is too short")
                    part[leads] = np.frombuffer(raw, "<u8").reshape(k, d)
                    part[padding] = 0
                    parts.append(part)
                chunk = parts[0] if len(parts) == 1 else np.stack(parts, axis=-1)
                out.write(chunk.data.cast("B"))
        for w, c in enumerate(held):
            if fulls[w].read(1):
                raise ValueError(f"{_full_file(party_dir, c)} is too long")
    upload = upload_dir(party_dir)
    for path in upload.iterdir():
        path.unlink()
    upload.rmdir()
