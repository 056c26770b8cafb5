"""What one run computes on: the clients' rows, the sketch, the noise, the encoding.

Also what the servers are given for it: the compiled program and the public
schedule it reads (both fixed by the workload and the server program), and the
:class:`~harness.engine.ClientJob` that tells a cluster what the clients prepare.
Every size is checked before anything is drawn.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.clients import (
    FixedPoint,
    InputBound,
    Prepared,
    Rows,
    Sketch,
    SyntheticRows,
    all_rows,
    check_dimensions,
    input_bound,
    open_rows,
)
from harness.engine import (
    ClientJob,
    Cluster,
    CompiledProgram,
    MpSpdz,
    Protocol,
    compile_program,
)
from harness.errors import InputError, check_disk, check_memory
from harness.experiments.config import RunConfig
from harness.experiments.modes import files_here
from harness.privacy import (
    CALIBRATIONS,
    Mechanism,
    NoiseSpec,
    Request,
    mechanism_class,
    zero_output_bound,
)
from harness.stream import BlockShape, SlotShape

__all__ = ["Workload", "build_workload", "check_fits", "check_noise", "check_workload_size",
           "check_zero_output",
           "client_job", "coin_technique", "largest_rows", "mechanism_for", "noise_for",
           "prepare_cluster", "program_for", "upload_model_mb"]


@dataclass
class Workload:
    """Everything public and private that one run computes on.

    ``rows`` are read a chunk at a time, and every run streams them: ``blocks`` is
    the ``fast`` program's block shape (its files are laid out per chunk of clients
    as they arrive), ``slots`` the ``reference`` program's with ``--input shares``
    (one row per slot, in the order the chunks arrive); a ``local`` run's servers
    write no file.
    """

    rows: Rows
    sketch: Sketch
    noise: NoiseSpec
    fp: FixedPoint
    seed: int  # the sketch's (and synthetic data's): --seed, or drawn and recorded
    mechanism: Mechanism  # who adds the noise, calibrated for this run
    blocks: BlockShape | None = None
    slots: SlotShape | None = None
    header: bool | None = None  # a text --data file's first line was a header (skipped)
    bound: InputBound | None = None  # --validate: each client's row checked against it
    poisoned: tuple[int, ...] = ()  # --poison: the clients that send out-of-range rows

    @property
    def n(self) -> int:
        return self.rows.n

    def decode(self, revealed: np.ndarray) -> np.ndarray:
        """The revealed ring elements in reals, as the mechanism released them."""
        return self.mechanism.decode(revealed, self.fp)

    @property
    def d(self) -> int:
        return self.rows.d

    @property
    def data(self) -> np.ndarray:
        """Every row in memory (checked against memory first)."""
        return all_rows(self.rows)


def noise_for(cfg: RunConfig, n: int, d: int, s: int) -> NoiseSpec:
    """What the clients add to their rows in this run (the mechanism says; none where
    the servers add the noise), refused unless it can be encoded and is certified."""
    if cfg.calibration not in CALIBRATIONS:
        raise InputError(f"unknown --calibration {cfg.calibration!r}; choose "
                         f"{' or '.join(CALIBRATIONS)}")
    return mechanism_class(cfg.mechanism).clients_noise(_request(cfg, n, d, s, None))


def _request(cfg: RunConfig, n: int, d: int, s: int, clients_noise: NoiseSpec | None
             ) -> Request:
    return Request(
        servers=cfg.party_count, corrupt=cfg.spec.corrupt(cfg.party_count), n=n, d=d, s=s,
        m=cfg.rows, eta=cfg.eta, frac_bits=cfg.frac_bits, epsilon=cfg.epsilon,
        delta=cfg.delta, grid_bits=cfg.grid_bits,
        coins=coin_technique(cfg.spec, cfg.party_count), noise=cfg.noise,
        calibration=cfg.calibration, t_prime=cfg.corrupt_clients, clients_noise=clients_noise)


def mechanism_for(cfg: RunConfig, n: int, d: int, s: int,
                  clients_noise: NoiseSpec | None = None) -> Mechanism:
    """The run's mechanism calibrated for n clients of d values and s buckets each, its
    noise certified; what it cannot certify is refused in one line. ``clients_noise``
    is what the clients add (:func:`noise_for`'s); without it, none (what the servers'
    noise alone costs)."""
    if clients_noise is None:
        clients_noise = NoiseSpec("none", n=n, m=cfg.rows, d=d, s=s, frac_bits=cfg.frac_bits)
    return mechanism_class(cfg.mechanism).calibrate(_request(cfg, n, d, s, clients_noise))


def check_noise(cfg: RunConfig) -> None:
    """:func:`noise_for` before anything else, where n and d are known without --data."""
    if cfg.data is not None:
        return  # build_workload checks it once the file gives n and d, before any draw
    s = cfg.rows if cfg.dense else cfg.sparsity
    check_dimensions(cfg.clients, cfg.rows, s, dense=cfg.dense)
    if cfg.dim < 1:
        raise InputError(f"--dim must be a positive integer, got {cfg.dim}")
    check_fits(cfg, cfg.clients, cfg.dim, s)  # in build_workload's order
    mechanism_for(cfg, cfg.clients, cfg.dim, s, noise_for(cfg, cfg.clients, cfg.dim, s))


def check_workload_size(n: int, d: int, m: int, s: int) -> None:
    """The dense sketch, held whole, and the accumulators must fit in memory (checked, not
    tried); a streamed run otherwise holds chunks."""
    check_memory(8.0 * n * d + 9.0 * s * n + 32.0 * m * d, f"n={n}, d={d}, s={s}",
                 "lower --clients, --dim or --rows, or drop --dense")


def check_fits(cfg: RunConfig, n: int, d: int, s: int) -> None:
    """What a run holds must fit: the dense sketch in memory; on this machine's disk, the
    files its route writes here (:mod:`harness.experiments.modes`): the parties' share
    files, or the data owner's input text (a streamed run otherwise holds chunks)."""
    if cfg.dense:
        check_workload_size(n, d, cfg.rows, s)
    route = cfg.route
    if not files_here(cfg.mode, route):
        return
    if route.sink == "owner":
        # Fixed-width decimals: a sign, up to 20 digits and a blank per value.
        check_disk(22.0 * n * s * d, Path(cfg.out),
                   f"the data owner's input text at n={n}, d={d}, s={s}",
                   "lower --clients, --dim or --sparsity")
        return
    check_disk(8.0 * cfg.party_count * n * s * d * cfg.share_format.words, Path(cfg.out),
               f"the parties' share files at n={n}, d={d}, s={s}",
               "lower --clients, --dim or --sparsity, or use --program local, which "
               "writes no share file")


def largest_rows(noise: NoiseSpec, dense: bool) -> int | None:
    """The largest m below ``noise.m`` at which R_D sends the n clients' rows (n above
    its threshold), or None if none does; dense sketches also need m to divide n."""
    n = noise.n

    def sends(m: int) -> bool:
        s = m if dense else noise.s
        return n > zero_output_bound(m, noise.d, s, noise.t_prime, noise.delta)

    if dense:
        return next((m for m in range(noise.m - 1, 0, -1) if n % m == 0 and sends(m)), None)
    low, high = noise.s, noise.m - 1  # the bound grows with m: the last m that sends
    if high < low or not sends(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if sends(middle) else (low, middle - 1)
    return low


def check_zero_output(cfg: RunConfig, noise: NoiseSpec, dense: bool) -> None:
    """Refuse, before any draw, a run of one's own data that R_D would reveal as zeros.

    The paper's R_D sends zeros at n <= 8 m ln(dm/delta) + s + t' (noise.py): the run
    would verify an all-zero sketch. Synthetic data keep the paper's behaviour (its
    tables run such n), and so does --allow-zero-output.
    """
    if cfg.data is None or cfg.allow_zero_output or not noise.zero_output:
        return
    bound = zero_output_bound(noise.m, noise.d, noise.s, noise.t_prime, noise.delta)
    most = largest_rows(noise, dense)
    fix = (f"use --rows {most} or fewer sketch rows" if most is not None else
           "no --rows works at this n: use more rows of data or raise --delta")
    raise InputError(
        f"--data has n={noise.n} rows, too few for m={noise.m} sketch rows: the paper's "
        f"client randomizer R_D would send zeros (it needs n > 8 m ln(dm/delta) + s + t' "
        f"= {bound:.1f}, t' the corrupt clients of --corrupt-clients; see the docs page "
        f"Privacy of the client noise); {fix}, or pass --allow-zero-output to run the "
        "paper's randomizer as it is")


def build_workload(cfg: RunConfig) -> Workload:
    rows: Rows | None = None
    if cfg.data is not None:
        rows = open_rows(cfg.data, cfg.eta, cfg.header)
        n, d = rows.n, rows.d
    else:
        check_dimensions(cfg.clients, cfg.rows, cfg.sparsity if not cfg.dense else cfg.rows)
        if cfg.dim < 1:
            raise InputError(f"--dim must be a positive integer, got {cfg.dim}")
        n, d = cfg.clients, cfg.dim
    s = cfg.rows if cfg.dense else cfg.sparsity
    check_dimensions(n, cfg.rows, s, dense=cfg.dense)
    check_fits(cfg, n, d, s)
    noise = noise_for(cfg, n, d, s)
    check_zero_output(cfg, noise, cfg.dense)
    mechanism = mechanism_for(cfg, n, d, s, noise)
    fp = FixedPoint(cfg.frac_bits)
    header = getattr(rows, "header", None)  # a text file's, before it is read whole
    # Without --seed the sketch and the synthetic data still get one, drawn here and
    # recorded with the run, so both can be recomputed from it.
    seed = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(7), "little")
    if rows is None:
        rows = SyntheticRows(n, d, cfg.eta, seed)
    sketch = Sketch.generate(n, cfg.rows, s, seed=seed, dense=cfg.dense)
    # The shape of the files the route's stream writes (none for a sum): a text row is
    # one word wide.
    route = cfg.route
    words = 1 if route.sink == "owner" else cfg.share_format.words
    blocks = (BlockShape.choose(n, cfg.rows, s, d, words) if route.shape == "blocked"
              else None)
    slots = SlotShape() if route.shape == "slots" else None
    bound = (input_bound(cfg.validation, noise, cfg.eta, cfg.frac_bits, n * s, d)
             if cfg.validation != "none" else None)
    return Workload(rows, sketch, noise, fp, seed, mechanism, blocks, slots, header, bound,
                    poisoned_clients(cfg.poison or 0, n))


def poisoned_clients(count: int, n: int) -> tuple[int, ...]:
    """``count`` of the n clients, drawn with the operating system's CSPRNG (--poison)."""
    if count > n:
        raise InputError(f"--poison {count} asks more clients to lie than the run has "
                         f"({n}); choose at most --clients")
    return tuple(sorted(secrets.SystemRandom().sample(range(n), count)))


def program_for(mp: MpSpdz, cfg: RunConfig, work: Workload) -> CompiledProgram:
    """The server program compiled for this workload (cached)."""
    program = cfg.server_program
    shape = work.blocks
    values = {"m": cfg.rows, "d": work.d, "parties": cfg.party_count,
              "validate": cfg.validation, "bound": work.bound.bound if work.bound else 0,
              # The check's comparisons: edaBits where no local conversion is and they are
              # cheaper than random bits (as for the central mechanism's coins).
              "edabits": coin_technique(cfg.spec, cfg.party_count)["technique"] == "edabits",
              "source": program.source(cfg.input_kind, as_input=cfg.inputs_aggregates),
              "block_rows": shape.block_rows if shape else 1,
              "chunk_blocks": shape.chunk_blocks if shape else 1}
    params = program.template_params(values)
    params.update(work.mechanism.template_params(cfg.reveal_noise))
    options: tuple[str, ...] = ()
    # the mechanism's coins, and the check's comparisons, convert shares locally where
    # the protocol can
    if work.mechanism.draws_coins or work.bound is not None:
        options = cfg.spec.split_args(cfg.party_count)
    return compile_program(mp, program.template, params, cache_dir=cfg.cache_dir,
                           options=options)


# Measured with benchmarks/mechanisms.py (docs: Mechanisms): spdz2k's edaBits cost 2.8 ms
# a coin against 1.7 ms for its arithmetic random bits; malicious-rep-ring's edaBits
# 3.4 us against 18 us.
_COINS_WITHOUT_SPLIT = {"spdz2k": "random-bits"}


def coin_technique(spec: Protocol, parties: int) -> dict[str, Any]:
    """How the central mechanism's program draws its coins under ``spec``: the XOR of
    a random ring element's locally converted summands where the protocol converts
    shares locally (free: only the popcount interacts), else edaBits' binary halves,
    or arithmetic random bits where those are cheaper."""
    if spec.splits:
        return {"technique": "split", "summands": parties}
    return {"technique": _COINS_WITHOUT_SPLIT.get(spec.name, "edabits"), "summands": 0}


def client_job(cfg: RunConfig, work: Workload) -> ClientJob:
    """What the clients compute on and how they hand it to the servers."""
    return ClientJob(work.rows, work.sketch, work.noise, work.fp,
                     cfg.share_format, route=cfg.route, sharing=cfg.sharing,
                     timeout=cfg.timeout, as_input=cfg.inputs_aggregates,
                     blocks=work.blocks or work.slots, poisoned=work.poisoned,
                     drop_poisoned=work.bound is not None)


def prepare_cluster(cfg: RunConfig, work: Workload, cluster: Cluster) -> Prepared:
    """The clients prepare every server's inputs for ``cluster`` (not yet delivered)."""
    return cluster.prepare(client_job(cfg, work))


def upload_model_mb(cfg: RunConfig, values: int) -> float:
    """What the clients must upload: every server's words of every noisy value."""
    if cfg.input_kind == "party":
        return 8 * values / 1e6  # the data owner's plaintext rows, to party 0
    return cfg.party_count * cfg.share_format.words * 8 * values / 1e6
