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
word) are as close to information-theoretic as the generator allows.

**The generator.** A component's words are the AES-256-CTR keystream under its
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

import ctypes
import ctypes.util
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.clients.layout import Layout
from harness.clients.sharing import ShareFormat, share_format
from harness.fileio import open_private, private_dir, write_private

__all__ = ["SEED_BYTES", "SeededSink", "Components", "components", "expand", "expand_file",
           "expand_party", "save_plan", "upload_dir", "upload_files"]

SEED_BYTES = 32
# Each seed keys its own stream, so every stream may start at counter zero.
_NONCE = bytes(16)
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


# --- the generator -----------------------------------------------------------------------

_lib_lock = threading.Lock()
_lib: list = []  # [the libcrypto handle, or None where it cannot be used]


def _libcrypto():
    with _lib_lock:
        if not _lib:
            _lib.append(_load_libcrypto())
        return _lib[0]


def _load_libcrypto():
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


def _aes_ctr_ctypes(lib, seeds: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
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
    lib = _libcrypto()
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
            part = memoryview(full[ends[c - 1] if c else 0:ends[c]]).cast("B")
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
                out.write(memoryview(chunk).cast("B"))
        for w, c in enumerate(held):
            if fulls[w].read(1):
                raise ValueError(f"{_full_file(party_dir, c)} is too long")
    upload = upload_dir(party_dir)
    for path in upload.iterdir():
        path.unlink()
    upload.rmdir()
