"""What one run computes on: the clients' rows, the sketch, the noise, the encoding.

Also what the servers are given for it: the compiled program and the public
schedule it reads (both fixed by the workload and the server program), and the
:class:`~harness.engine.ClientJob` that tells a cluster what the clients prepare.
Every size is checked before anything is drawn.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.clients import (
    CALIBRATIONS,
    FixedPoint,
    InputBound,
    NoiseSpec,
    Prepared,
    Rows,
    ServerNoise,
    Sketch,
    SyntheticRows,
    all_rows,
    certificate,
    check_dimensions,
    check_dng_draws,
    concentration_failure,
    input_bound,
    open_rows,
    server_noise,
    smallest_n,
    zero_output_bound,
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
from harness.stream import BlockShape, SlotShape

__all__ = ["Workload", "build_workload", "check_certified", "check_encodable", "check_fits",
           "check_noise", "check_ring", "check_sketch_ring", "check_workload_size",
           "check_zero_output",
           "client_job", "coin_technique", "largest_rows", "noise_for", "servers_noise_for",
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
    blocks: BlockShape | None = None
    slots: SlotShape | None = None
    header: bool | None = None  # a text --data file's first line was a header (skipped)
    servers_noise: ServerNoise | None = None  # dng or central: the servers' noise
    bound: InputBound | None = None  # --validate: each client's row checked against it
    poisoned: tuple[int, ...] = ()  # --poison: the clients that send out-of-range rows

    @property
    def n(self) -> int:
        return self.rows.n

    def decode(self, revealed: np.ndarray) -> np.ndarray:
        """The revealed ring elements in reals: central's are grid steps, the rest
        lattice steps 2^-F."""
        noise = self.servers_noise
        if noise is not None and noise.kind == "central":
            signed = np.asarray(revealed, dtype=np.uint64).view(np.int64)
            return signed.astype(np.float64) * noise.step
        return self.fp.decode(revealed)

    @property
    def d(self) -> int:
        return self.rows.d

    @property
    def data(self) -> np.ndarray:
        """Every row in memory (checked against memory first)."""
        return all_rows(self.rows)


def check_encodable(noise: NoiseSpec, fp: FixedPoint, eta: float, suggest: bool = True) -> None:
    """Refuse parameters whose noisy entries cannot be encoded, before drawing any.

    Ten standard deviations past eta: no draw of a run ever reaches that, so a
    run this lets through does not fail on an entry later.
    """
    try:
        spread = math.sqrt(noise.variance)
    except (ZeroDivisionError, OverflowError, ValueError):
        spread = math.inf
    worst = (eta + 10 * spread) * fp.scale
    if not worst < 2.0**63:
        size = f"2^{math.log2(worst):.1f}" if math.isfinite(worst) else "infinity"
        raise InputError(f"fixed-point overflow: entries up to eta + 10 noise standard "
                         f"deviations encode to {size}, beyond the ring's bound 2^63; raise "
                         f"--epsilon, or lower --eta"
                         f"{_lower_frac_bits(noise, None, None) if suggest else ''}")


def _lower_frac_bits(noise: NoiseSpec, n: int | None, s: int | None) -> str:
    """", or --frac-bits F": the largest F below the run's that fits and is certified."""
    found = passing_frac_bits(noise, n, s, range(noise.frac_bits - 1, -1, -1))
    return "" if found is None else f", or use --frac-bits {found} (now {noise.frac_bits})"


def _passes(noise: NoiseSpec, n: int | None, s: int | None) -> bool:
    try:
        fp = FixedPoint(noise.frac_bits)
        check_encodable(noise, fp, noise.eta, suggest=False)
        if n is not None and s is not None:
            check_ring(noise, fp, n, s, noise.eta, suggest=False)
    except InputError:
        return False
    return certified_enough(noise)


def passing_frac_bits(noise: NoiseSpec, n: int | None, s: int | None,
                      candidates: range) -> int | None:
    """The first --frac-bits of ``candidates`` at which ``noise`` fits the ring and the
    accountant certifies it (Skellam is calibrated on the lattice: never searched)."""
    if noise.kind not in ("gaussian", "laplace"):
        return None
    for frac_bits in candidates:
        try:
            candidate = dataclasses.replace(noise, frac_bits=frac_bits)
        except InputError:
            continue
        if _passes(candidate, n, s):
            return frac_bits
    return None


def certified_enough(noise: NoiseSpec) -> bool:
    """The accountant's epsilon for the noise as released is at most the requested one."""
    if noise.kind == "none":
        return True
    # The analytic calibration's root finder leaves a relative 1e-9 either way.
    return certificate(noise)[0] <= noise.epsilon * (1 + 1e-6)


def noise_for(cfg: RunConfig, n: int, d: int, s: int) -> NoiseSpec:
    """The clients' noise for this run, refused unless it can be encoded and the
    accountant certifies it."""
    if cfg.calibration not in CALIBRATIONS:
        raise InputError(f"unknown --calibration {cfg.calibration!r}; choose "
                         f"{' or '.join(CALIBRATIONS)}")
    if cfg.mechanism != "ltm":  # the servers add the noise: the clients send plain rows
        return NoiseSpec("none", n=n, m=cfg.rows, d=d, s=s, frac_bits=cfg.frac_bits)
    # --calibration is the Gaussian's; every other noise has its one (named corollary).
    calibration = cfg.calibration if cfg.noise == "gaussian" else "corollary"
    noise = NoiseSpec(cfg.noise, n=n, m=cfg.rows, d=d, s=s, epsilon=cfg.epsilon,
                      delta=cfg.delta, eta=cfg.eta, t_prime=cfg.corrupt_clients,
                      calibration=calibration, frac_bits=cfg.frac_bits)
    if noise.kind == "gaussian" and not noise.zero_output and not noise.epsilon <= 100:
        # The lattice's accountant (as the analytic calibration's range) stops at 100.
        raise InputError(f"--epsilon must lie in (0, 100] for gaussian noise, got "
                         f"{noise.epsilon:g}; no accountant here certifies a larger one")
    # Encodable first: absurd numbers (an epsilon of 1e-300) overflow the variance,
    # which that check words; the accountant needs a finite one.
    fp = FixedPoint(cfg.frac_bits)
    check_encodable(noise, fp, cfg.eta)
    check_ring(noise, fp, n, s, cfg.eta)
    check_certified(noise, n, s)
    return noise


def servers_noise_for(cfg: RunConfig, n: int, d: int, s: int) -> ServerNoise | None:
    """The servers' noise of a dng or central run, certified (None for the LTM); an
    (epsilon, delta) that would need too many coins, or Poissons beyond an exact
    draw, or a sketch that could pass the ring, is refused in one line."""
    if cfg.mechanism == "ltm":
        return None
    if round(cfg.eta * 2.0**cfg.frac_bits) < 1:  # no sensitivity to calibrate the noise to
        least = next((f for f in range(53) if round(cfg.eta * 2.0**f) >= 1), None)
        fix = (f"use --frac-bits {least} or more" if least is not None
               else "rescale the data to a larger --eta")
        raise InputError(f"--eta {cfg.eta:g} is below half a step of the lattice at --frac-bits "
                         f"{cfg.frac_bits}: every value would encode to 0, and --mechanism "
                         f"{cfg.mechanism} has no sensitivity to calibrate its noise to; {fix}")
    # central's probabilistic truncation reads the sketch as a 63-bit signed value.
    limit = 2.0**62 if cfg.mechanism == "central" else 2.0**63
    if cfg.mechanism == "central" or s * cfg.eta * 2.0**cfg.frac_bits >= limit:
        # dng's noise first where it can be computed: its limit names the larger change
        check_sketch_ring(cfg, n, s, limit, 0.0)
    noise = server_noise(cfg.mechanism, servers=cfg.party_count,
                         corrupt=cfg.spec.corrupt(cfg.party_count), eta=cfg.eta, s=s, d=d,
                         m=cfg.rows, epsilon=cfg.epsilon, delta=cfg.delta,
                         frac_bits=cfg.frac_bits, clients=n, grid_bits=cfg.grid_bits)
    if noise is not None and noise.kind == "dng":
        check_dng_draws(noise)
        # The servers' noise adds to the revealed sum: ten deviations, as check_ring's.
        check_sketch_ring(cfg, n, s, limit, 10 * noise.std * 2.0**cfg.frac_bits)
    if noise is not None and noise.kind == "central":
        # recorded with the noise: its generator names how the coins were drawn
        return dataclasses.replace(noise, **coin_technique(cfg.spec, cfg.party_count))
    return noise


def check_sketch_ring(cfg: RunConfig, n: int, s: int, limit: float, noise: float) -> None:
    """Refuse a dng or central run whose bucket sums (n s eta 2^F lattice steps at most,
    plus ``noise`` steps of the servers') could reach ``limit``, naming what fits."""
    one = s * cfg.eta * 2.0**cfg.frac_bits  # one client's most in a bucket, in steps
    if n * one + noise < limit:
        return
    where = ("rounds inside the MPC" if cfg.mechanism == "central"
             else "reveals in the ring Z_2^64")
    what = (f"n={n} clients could sum past 2^{math.log2(limit):.0f} in one bucket (2^"
            f"{math.log2(n * one + noise):.1f} at --eta {cfg.eta:g}, --frac-bits "
            f"{cfg.frac_bits}), beyond what --mechanism {cfg.mechanism} {where}")
    fixes = []
    most = math.ceil((limit - noise) / one) - 1  # the most clients whose sums stay below
    if most >= 1:
        fixes.append(f"--clients <= {most}")
    bits = next((f for f in range(cfg.frac_bits - 1, -1, -1)
                 if n * s * cfg.eta * 2.0**f + noise * 2.0**(f - cfg.frac_bits) < limit), None)
    if bits is not None:
        fixes.append(f"--frac-bits {bits}")
    fixes.append("a smaller --eta (rescale the data)")
    raise InputError(f"{what}; use {', or '.join(fixes)}")


def check_noise(cfg: RunConfig) -> None:
    """:func:`noise_for` before anything else, where n and d are known without --data."""
    if cfg.data is not None:
        return  # build_workload checks it once the file gives n and d, before any draw
    s = cfg.rows if cfg.dense else cfg.sparsity
    check_dimensions(cfg.clients, cfg.rows, s, dense=cfg.dense)
    if cfg.dim < 1:
        raise InputError(f"--dim must be a positive integer, got {cfg.dim}")
    check_fits(cfg, cfg.clients, cfg.dim, s)  # in build_workload's order
    noise_for(cfg, cfg.clients, cfg.dim, s)
    servers_noise_for(cfg, cfg.clients, cfg.dim, s)


def check_certified(noise: NoiseSpec, n: int | None = None, s: int | None = None) -> None:
    """Refuse noise whose certified epsilon exceeds the requested one, before any draw.

    The certificate is for the noise as released, rounded to the 2^-F lattice. The
    Skellam calibration meets its epsilon by construction, and the analytic one
    once the lattice is fine enough for the noise (at small F the rounding can
    erase it: then the smallest F that passes is named); the paper's corollary
    does not at every d (its sigma^2 grows like d^2, the l2 sensitivity like
    sqrt(d): at d = 1, m = 100 it certifies epsilon 1.66 for a requested 1), and
    such a run would claim a guarantee it does not give.
    """
    if certified_enough(noise):
        return
    epsilon, _ = certificate(noise)
    asked = f"({noise.epsilon:g}, {noise.delta:g})-DP"
    if (noise.kind != "laplace"
            and concentration_failure(noise.n, noise.m, noise.s, noise.t_prime) >= noise.delta):
        raise InputError(
            f"the accountant certifies no epsilon for this {noise.kind} noise at n={noise.n}, "
            f"so the run would not be {asked}: too few clients hide each bucket (delta_E >= "
            f"delta); use --clients >= {smallest_n(noise.m, noise.s, noise.t_prime, noise.delta)}"
            " or raise --delta")
    figure = f"epsilon {epsilon:.4g}" if math.isfinite(epsilon) else "no epsilon"
    what = (f"the {noise.calibration} calibration's {noise.kind} noise, rounded to the "
            f"lattice at --frac-bits {noise.frac_bits}, certifies {figure}, above "
            f"the requested {noise.epsilon:g} (delta {noise.delta:g}, d={noise.d}, "
            f"s={noise.s}), so the run would not be {asked}")
    higher = passing_frac_bits(noise, n, s, range(noise.frac_bits + 1, 53))
    if higher is not None:
        raise InputError(f"{what}; the smallest --frac-bits it is certified at is {higher}")
    if noise.kind == "gaussian" and noise.calibration != "analytic":
        raise InputError(f"{what}; use --calibration analytic (it certifies --epsilon once "
                         "the lattice is fine enough)")
    raise InputError(f"{what}; raise --epsilon or the number of clients")


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


def check_ring(noise: NoiseSpec, fp: FixedPoint, n: int, s: int, eta: float,
               suggest: bool = True) -> None:
    """Refuse, before any draw, an n whose bucket sums could pass the ring's 2^63.

    A bucket sums at most s * n entries of |value| <= eta + 10 noise deviations;
    past 2^63 the revealed sum would wrap. (The bound actually met is checked
    again on the values drawn.)
    """
    spread = math.sqrt(noise.variance) if noise.kind != "none" else 0.0
    worst = s * n * (eta + 10 * spread) * fp.scale
    if worst >= 2.0**63:
        most = int(2.0**63 / (s * (eta + 10 * spread) * fp.scale))
        lower = _lower_frac_bits(noise, n, s) if suggest else ""
        raise InputError(f"n={n} clients could sum past the ring Z_2^64's bound 2^63 in one "
                         f"bucket (2^{math.log2(worst):.1f}); use --clients <= {most}{lower}")


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
    servers = servers_noise_for(cfg, n, d, s)
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
    return Workload(rows, sketch, noise, fp, seed, blocks, slots, header, servers, bound,
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
    options: tuple[str, ...] = ()
    if work.servers_noise is not None:
        params.update(work.servers_noise.template_params(), reveal_noise=cfg.reveal_noise)
        if work.servers_noise.kind == "central":
            options = cfg.spec.split_args(cfg.party_count)
    if work.bound is not None:  # the comparisons convert shares locally where they can
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
