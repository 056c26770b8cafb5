"""``ltm run``: from client data to a verified, revealed sketch.

Steps: data and sketch, noise calibration, fixed-point encoding and sharing
(or party 0's input file), compile (cached), launch the parties, parse their
statistics, check the revealed sketch bit for bit against the plaintext
computation, write the results. The output directory appears only complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.clients import (
    ADDITIVE,
    FixedPoint,
    Layout,
    NoiseSpec,
    Prepared,
    SeededSink,
    ShareFormat,
    ShareSink,
    Sketch,
    TextSink,
    check_dimensions,
    check_matrix,
    expand_party,
    format_integers,
    load_matrix,
    noise_rng,
    prepare_inputs,
    synthetic_matrix,
    tamper_share_file,
    tamper_text_file,
)
from harness.engine import (
    DEFAULT_PROTOCOL,
    OUTPUT_MARKER,
    PROTOCOLS,
    CompiledProgram,
    LocalCluster,
    MpSpdz,
    Protocol,
    aggregate_share_file,
    build_refusal,
    compile_program,
    ensure_mpspdz,
    parse_output,
    protocol_for,
)
from harness.errors import (
    InputError,
    MpSpdzError,
    PartyError,
    TamperDetectedError,
    VerificationError,
    check_memory,
    check_number,
)
from harness.experiments.results import (
    FORMAT_VERSION,
    metadata,
    output_directory,
    write_json_atomic,
)
from harness.fileio import open_private, output_lock
from harness.remote import Inventory, check_distinct, load_inventory

__all__ = ["PROGRAMS", "INPUT_MODES", "PROTOCOLS", "SHARINGS", "RunConfig", "run",
           "default_input_mode"]

PROGRAMS = ("fast", "reference", "local")
INPUT_MODES = ("shares", "party")
# full: every server receives all its words; seeded: all but one component as seeds
SHARINGS = ("full", "seeded")


def default_input_mode(program: str) -> str:
    # reference is the textbook program: the data owner types its rows in.
    return "party" if program == "reference" else "shares"


@dataclass
class RunConfig:
    out: Path
    parties: int | None = None  # default: every host of --hosts, else 2
    clients: int = 100_000
    dim: int = 10
    rows: int = 100
    sparsity: int = 1
    dense: bool = False
    data: Path | None = None
    noise: str = "gaussian"
    epsilon: float = 1.0
    delta: float = 1e-6
    eta: float = 1.0
    corrupt_clients: int = 0
    program: str = "fast"
    input_mode: str | None = None
    frac_bits: int = 16
    seed: int | None = None
    mp_spdz: Path | None = None
    port: int | None = None
    timeout: float = 900.0
    force: bool = False
    keep_work: bool = False
    cache_dir: Path | None = None
    hosts: Path | None = None  # inventory: run each party on its own host over SSH
    network: str | None = None  # emulated network profile for local parties
    install_mpspdz: bool = False  # install the release on first use (the CLI's default)
    protocol: str = DEFAULT_PROTOCOL
    tamper: int | None = None  # test aid: change one word of this party's input
    sharing: str = "full"
    extra: dict = field(default_factory=dict)

    @property
    def spec(self) -> Protocol:
        return protocol_for(self.protocol)

    @property
    def share_format(self) -> ShareFormat:
        """The clients' sharing: the protocol's own, or additive for servers to input."""
        return self.spec.share_format or ADDITIVE

    @property
    def inputs_aggregates(self) -> bool:
        """Servers aggregate additive shares and input the sums through the protocol."""
        return self.program == "local" and self.spec.share_format is None

    def validate(self) -> None:
        check_numbers(self)
        if self.program not in PROGRAMS:
            raise InputError(f"unknown --program {self.program!r}; choose {', '.join(PROGRAMS)}")
        if self.input_mode is None:
            self.input_mode = default_input_mode(self.program)
        if self.input_mode not in INPUT_MODES:
            raise InputError(f"unknown --input {self.input_mode!r}; choose shares or party")
        if self.program == "local" and self.input_mode != "shares":
            raise InputError("--program local aggregates the servers' own shares; "
                             "it needs --input shares")
        spec = protocol_for(self.protocol)
        if self.sharing not in SHARINGS:
            raise InputError(f"unknown --sharing {self.sharing!r}; choose full or seeded")
        if self.sharing == "seeded" and self.input_mode != "shares":
            raise InputError("--sharing seeded compresses the servers' share files, and with "
                             "--input party the servers receive none; use --input shares or "
                             "--sharing full")
        if self.tamper is not None and self.hosts is not None:
            raise InputError("--tamper is a local test aid; it cannot be used with --hosts")
        if self.input_mode == "shares" and self.program != "local" and spec.share_format is None:
            raise InputError(f"--protocol {spec.name} cannot run --program {self.program} on "
                             f"client share files ({spec.no_client_shares}); use --program "
                             "local (the servers input their aggregates) or --input party")
        if self.parties is None:
            self.parties = (len(load_inventory(self.hosts).hosts) if self.hosts
                            else spec.exact_parties or 2)
        if self.parties < 2:
            raise InputError(f"--parties must be at least 2 ({spec.name}), got {self.parties}")
        spec.check_parties(self.parties)
        if self.tamper is not None:
            if not 0 <= self.tamper < self.parties:
                raise InputError(f"--tamper {self.tamper} is not a party; choose one of "
                                 f"0..{self.parties - 1}")
            if self.input_mode == "party":
                raise InputError("--tamper changes a server's shares, and with --input party "
                                 "the servers hold none; use --input shares")
        if self.timeout <= 0:
            raise InputError("--timeout must be positive")
        if self.hosts is not None and self.inputs_aggregates:
            raise InputError(f"--protocol {spec.name} --program local inputs each server's "
                             "aggregate through the protocol, which --hosts does not run "
                             "remotely yet; run it with local parties")
        if self.hosts is not None and self.network is not None:
            raise InputError("--network emulates a network between parties on this machine; "
                             "with --hosts the real network is used: drop one of them")
        if self.network is not None:
            from harness.engine import profile_for

            profile_for(self.network)


# Far beyond any run this harness can do, yet small enough to fail cleanly.
MAX_CLIENTS = 1 << 40
MAX_DIM = 1 << 24
MAX_PARTIES = 256


def check_numbers(cfg: RunConfig) -> None:
    """Every numeric option finite and in range, before anything is read or drawn."""
    # Lower bounds of the dimensions and parties: checked (and worded) by the sketch and
    # validate(), still before any data is drawn.
    for option, value, low, high in (
            ("--clients", cfg.clients, None, MAX_CLIENTS), ("--dim", cfg.dim, None, MAX_DIM),
            ("--rows", cfg.rows, None, MAX_CLIENTS),
            ("--sparsity", cfg.sparsity, None, MAX_CLIENTS),
            ("--corrupt-clients", cfg.corrupt_clients, 0, MAX_CLIENTS),
            ("--frac-bits", cfg.frac_bits, 0, 52)):
        check_number(option, value, low=low, high=high, integer=True)
    for option, value, low, high in (
            ("--parties", cfg.parties, None, MAX_PARTIES), ("--seed", cfg.seed, 0, 2**63 - 1),
            ("--port", cfg.port, 1024, 65535)):
        if value is not None:
            check_number(option, value, low=low, high=high, integer=True)
    check_number("--epsilon", cfg.epsilon, low=0, open_low=True)
    check_number("--delta", cfg.delta, low=0, high=1, open_low=True)
    check_number("--eta", cfg.eta, low=0, open_low=True)
    check_number("--timeout", cfg.timeout, low=0, high=10**7, open_low=True)


def check_encodable(noise: NoiseSpec, fp: FixedPoint, eta: float) -> None:
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
                         f"--epsilon, or lower --eta or --frac-bits (now {fp.frac_bits})")


def check_workload_size(n: int, d: int, m: int, s: int) -> None:
    """The data, the sketch and the accumulators must fit in memory (checked, not tried)."""
    check_memory(8.0 * n * d + 9.0 * s * n + 32.0 * m * d, f"n={n}, d={d}, s={s}",
                 "lower --clients, --dim or --sparsity (or --scale)")


@dataclass
class Workload:
    """Everything public and private that one run computes on."""

    data: np.ndarray
    sketch: Sketch
    noise: NoiseSpec
    fp: FixedPoint
    layout: Layout

    @property
    def n(self) -> int:
        return self.data.shape[0]

    @property
    def d(self) -> int:
        return self.data.shape[1]


def build_workload(cfg: RunConfig) -> Workload:
    data = None
    if cfg.data is not None:
        data, _ = load_matrix(cfg.data)
        n, d = data.shape
    else:
        check_dimensions(cfg.clients, cfg.rows, cfg.sparsity if not cfg.dense else cfg.rows)
        if cfg.dim < 1:
            raise InputError(f"--dim must be a positive integer, got {cfg.dim}")
        n, d = cfg.clients, cfg.dim
    s = cfg.rows if cfg.dense else cfg.sparsity
    check_dimensions(n, cfg.rows, s, dense=cfg.dense)
    check_workload_size(n, d, cfg.rows, s)
    noise = NoiseSpec(cfg.noise, n=n, m=cfg.rows, d=d, s=s, epsilon=cfg.epsilon,
                      delta=cfg.delta, eta=cfg.eta, t_prime=cfg.corrupt_clients)
    fp = FixedPoint(cfg.frac_bits)
    check_encodable(noise, fp, cfg.eta)
    if data is None:
        data = synthetic_matrix(n, d, cfg.eta, cfg.seed)
    check_matrix(data, cfg.eta)
    sketch = Sketch.generate(n, cfg.rows, s, seed=cfg.seed, dense=cfg.dense)
    blocked = cfg.program != "reference"
    layout = (Layout.blocked(sketch, d, share_words=cfg.share_format.words) if blocked
              else Layout.plain(sketch, d))
    return Workload(data, sketch, noise, fp, layout)


def program_for(mp: MpSpdz, cfg: RunConfig, work: Workload) -> CompiledProgram:
    m, d = cfg.rows, work.d
    if cfg.program == "local":
        source = "inputs" if cfg.inputs_aggregates else "shares"
        return compile_program(mp, "open", {"m": m, "d": d, "source": source,
                                            "parties": cfg.parties}, cache_dir=cfg.cache_dir)
    if cfg.program == "reference":
        return compile_program(mp, "reference", {"m": m, "d": d, "source": cfg.input_mode},
                               cache_dir=cfg.cache_dir)
    return compile_program(mp, "fast", {"m": m, "d": d, "source": cfg.input_mode,
                                        "block_rows": work.layout.block_rows,
                                        "chunk_blocks": work.layout.chunk_blocks},
                           cache_dir=cfg.cache_dir)


def public_input_for(cfg: RunConfig, work: Workload) -> str:
    """The public schedule the program reads (it depends only on the sketch)."""
    if cfg.program == "local":
        return ""
    if cfg.program == "reference":
        # (bucket, sign) of every slot: 25M pairs at s = 50, so numpy formats them
        pairs = np.stack([work.sketch.rows.ravel(), work.sketch.signs.ravel()], axis=1)
        return f"{pairs.shape[0]}\n" + format_integers(pairs.ravel()).decode("ascii")
    lay = work.layout
    return f"{lay.n_chunks}\n" + format_integers(lay.block_acc).decode("ascii")


def prepare_cluster(cfg: RunConfig, work: Workload, cluster: LocalCluster) -> Prepared:
    if cfg.input_mode == "shares" and getattr(cluster, "client_host", None) is not None:
        # The inventory's [client] machine prepares the shares and sends them itself.
        prepared = cluster.prepare_on_client(work.data, work.sketch, work.layout, work.noise,
                                             cfg.frac_bits, cfg.timeout, cfg.share_format,
                                             cfg.sharing)
        work.fp.check_bucket_bound(prepared.abs_sums)
        return prepared
    if cfg.input_mode == "party":
        sink = TextSink(cluster.input_file(), cfg.parties)
    elif cfg.sharing == "seeded":
        sink = SeededSink([cluster.outbox(i) for i in range(cfg.parties)], work.layout,
                          cfg.share_format, work.n, work.sketch.s, work.d)
    else:
        sink = ShareSink([cluster.outbox_share_file(i) for i in range(cfg.parties)],
                         cfg.share_format)
    prepared = prepare_inputs(work.data, work.sketch, work.layout, work.noise, work.fp, sink,
                              noise_rng())
    # Before any party starts: a wrapped sum would reveal garbage, not an error.
    work.fp.check_bucket_bound(prepared.abs_sums)
    return prepared


def aggregate_locally(cluster: LocalCluster, work: Workload, cfg: RunConfig) -> list[float]:
    seconds = []
    for i in range(cluster.parties):
        raw = cluster.share_file(i)
        received = raw.with_name(f"Received-P{i}.data")
        if not received.exists():  # else a rerun on the same inputs: aggregate them again
            raw.rename(received)
        dest = input_path(cluster, i) if cfg.inputs_aggregates else raw
        seconds.append(aggregate_share_file(received, work.layout, dest, cfg.share_format,
                                            as_input=cfg.inputs_aggregates))
    return seconds


def input_path(cluster: LocalCluster, party: int) -> Path:
    return cluster.party_dir(party) / "Player-Data" / f"Input-P{party}-0"


def tamper_input(cfg: RunConfig, work: Workload, cluster: LocalCluster) -> None:
    """Change one word of party ``cfg.tamper``'s input to the MPC (``--tamper``).

    The first word of the first real share: under a replicated sharing that is
    a_i, the word the party's neighbour also holds, so a malicious protocol can
    notice; padding rows are never revealed, so changing one would prove nothing.
    """
    party = cfg.tamper
    if cfg.inputs_aggregates:
        tamper_text_file(input_path(cluster, party))
        return
    fmt = cfg.share_format
    row = 0
    if cfg.program == "fast":
        row = int(np.flatnonzero(work.layout.file_slot >= 0)[0])
    tamper_share_file(cluster.share_file(party), fmt, row * work.d * fmt.words)


def run(cfg: RunConfig, *, echo=None) -> dict:
    cfg.validate()
    # Held to the end: a second run on this --out would replace this one's results.
    with output_lock(cfg.out):
        return _run_locked(cfg, echo)


def _run_locked(cfg: RunConfig, echo) -> dict:
    mp = ensure_mpspdz(cfg.mp_spdz, auto_install=cfg.install_mpspdz)
    check_protocol_usable(mp, cfg.protocol)  # fail before any heavy work
    check_placement(cfg)
    work = build_workload(cfg)
    with output_directory(Path(cfg.out), force=cfg.force) as staging:
        workdir = staging / "work"
        try:
            result = _run_in(cfg, mp, work, staging, workdir)
        finally:
            if not cfg.keep_work:
                shutil.rmtree(workdir, ignore_errors=True)
        if not result["verification"]["ok"]:
            # Keep the evidence, but never as a normal result.
            failed = Path(str(cfg.out) + ".mismatch")
            shutil.rmtree(failed, ignore_errors=True)
            shutil.copytree(staging, failed)
            raise VerificationError(
                f"the revealed sketch differs from the plaintext computation in "
                f"{result['verification']['mismatches']} of {result['verification']['entries']}"
                f" entries; evidence kept in {failed}")
    if echo:
        echo(summary(result, Path(cfg.out)))
    return result


def check_protocol_usable(mp: MpSpdz, protocol: str) -> None:
    """The protocol's binary is there and this MP-SPDZ build will run it."""
    from harness.engine import unusable_reason

    mp.binary(protocol_for(protocol).binary)
    reason = unusable_reason(protocol, mp.root)
    if reason:
        raise MpSpdzError(f"--protocol {protocol} cannot run with the MP-SPDZ in {mp.root}: "
                          f"{reason}")


def check_placement(cfg: RunConfig) -> None:
    """Fail on hosts or network problems before any heavy work."""
    if cfg.hosts is not None:
        inventory_for(cfg)
    if cfg.network is not None:
        from harness.engine import check_requirements

        check_requirements()


def make_cluster(cfg: RunConfig, mp: MpSpdz, workdir: Path):
    """Local parties (optionally in emulated networks) or one party per SSH host."""
    if cfg.hosts is not None:
        from harness.remote import SshCluster  # paramiko only when it is needed

        return SshCluster(mp, inventory_for(cfg), workdir, cfg.protocol,
                          inventory_path=cfg.hosts)
    return LocalCluster(mp, cfg.parties, workdir, protocol=cfg.protocol, network=cfg.network)


def inventory_for(cfg: RunConfig) -> Inventory:
    """The inventory's first ``cfg.parties`` hosts (party i runs on the i-th)."""
    inv = load_inventory(cfg.hosts)
    check_distinct(inv, cfg.hosts)
    if cfg.parties > len(inv.hosts):
        raise InputError(f"{cfg.parties} parties need {cfg.parties} hosts, but {cfg.hosts} "
                         f"lists {len(inv.hosts)}; add [[party]] entries or lower --parties")
    return dataclasses.replace(inv, hosts=inv.hosts[: cfg.parties])


def _run_in(cfg: RunConfig, mp: MpSpdz, work: Workload, staging: Path, workdir: Path) -> dict:
    program = program_for(mp, cfg, work)
    result = execute(cfg, mp, work, program, workdir)
    output = work.fp.decode(result.pop("_revealed")) / math.sqrt(work.sketch.s)
    write_json_atomic(staging / "result.json", result)
    work.sketch.save(staging / "sketch.npz")
    np.save(staging / "output.npy", output)
    with open_private(staging / "data.npy") as fh:  # the clients' own rows
        np.save(fh, work.data)
    return result


@dataclass
class ServerInputs:
    """The servers' inputs once the clients are done: their files in ``cluster``,
    and the clients' measurements of making and sending them."""

    cluster: LocalCluster
    prepared: Prepared
    uploaded: dict[int, dict] | None
    expand_s: list[float] | None


def execute(cfg: RunConfig, mp: MpSpdz, work: Workload, program: CompiledProgram,
            workdir: Path, schedule: str | None = None, *,
            inputs: ServerInputs | None = None, keep_inputs: bool = False) -> dict:
    """One complete run in ``workdir``: fresh noise and masks, parties, verification.

    ``schedule`` is :func:`public_input_for`'s text, for callers that repeat a
    workload. Returns the result record (nothing is written outside ``workdir``);
    its ``_revealed`` entry holds the revealed ring elements.

    ``keep_inputs`` (local parties, no network) adds ``_inputs``, the servers'
    inputs as this run left them; passed back as ``inputs``, the next run reuses
    them, so the servers compute again on the same shares and the clients' side
    (prepare, upload, expand) is not repeated: its figures are the first run's.
    """
    if keep_inputs and (cfg.hosts is not None or cfg.network is not None
                        or cfg.tamper is not None):
        raise ValueError("only local parties without --network or --tamper keep their inputs")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    timings["compile_s"] = program.compile_seconds or 0.0
    if inputs is None:
        cluster = make_cluster(cfg, mp, workdir)
        prepared = prepare_cluster(cfg, work, cluster)
        uploaded = expand_s = None
    else:
        cluster, prepared = inputs.cluster, inputs.prepared
        uploaded, expand_s = inputs.uploaded, inputs.expand_s
    timings["prepare_s"] = prepared.seconds
    aggregate_s = None
    # Under --network one emulated network carries the upload and then the MPC.
    with network_session(cluster):
        if inputs is None:
            uploaded, expand_s = deliver(cfg, work, cluster)
        if cfg.program == "local":
            if cfg.hosts is None:
                aggregate_s = aggregate_locally(cluster, work, cfg)
            else:  # each server aggregates on its own host, timed there
                cluster.aggregate_on_hosts(work.layout, cfg.share_format)
        if cfg.tamper is not None:  # after the upload: a server changes what it received
            tamper_input(cfg, work, cluster)
        launched = time.perf_counter()
        if schedule is None:
            schedule = public_input_for(cfg, work)
        try:
            runs = cluster.run(program, schedule, timeout=cfg.timeout, port=cfg.port)
        except PartyError as exc:
            raise_if_detected(cfg.spec, exc, workdir)
            refusal = build_refusal(cfg.protocol, mp.root / cfg.spec.binary, exc.stderr)
            if refusal:
                raise MpSpdzError(refusal) from exc
            raise
    timings["mpc_wall_s"] = time.perf_counter() - launched
    m, d, s = work.sketch.m, work.d, work.sketch.s
    revealed = parse_output("P0", runs[0].completed.stdout, m * d).reshape(m, d)
    # Every party that printed its view is checked: one honest-looking P0 is not enough.
    mismatches = max(
        int(np.count_nonzero(parse_output(f"P{r.party}", r.completed.stdout, m * d)
                             .reshape(m, d) != prepared.expected))
        for r in runs if r.party == 0 or OUTPUT_MARKER in r.completed.stdout)
    parties = []
    if cfg.sharing == "seeded" and expand_s is None:
        expand_s = [r.stats["expand_s"] for r in runs]
    if expand_s is not None:
        timings["expand_s"] = max(expand_s)
    for r in runs:
        row = {"party": r.party, **r.stats, "wall_s": r.completed.wall_seconds}
        if uploaded is not None:
            row.update(uploaded[r.party])
        if expand_s is not None:
            row["expand_s"] = expand_s[r.party]
        if cfg.program == "local":
            row["mpc_time_s"] = row["time_s"]
            row["aggregate_s"] = (aggregate_s[r.party] if aggregate_s is not None
                                  else r.stats["aggregate_s"])
            row["time_s"] = row["mpc_time_s"] + row["aggregate_s"]
        parties.append(row)
    uploads = [p["upload_s"] for p in parties if p.get("upload_s") is not None]
    if uploads:
        # The clients send to all servers at once: the upload lasts as long as the slowest.
        timings["client_upload_s"] = max(uploads)
    global_mb = max(p["global_data_sent_mb"] for p in parties)
    # Over hosts, what was sent; here, what the clients would send (the files are in place).
    upload = getattr(cluster, "client_sent_bytes", None) or prepared.upload_bytes
    timings["total_s"] = time.perf_counter() - started
    t_mpc = max(p["time_s"] for p in parties)
    result = {
        "format_version": FORMAT_VERSION,
        "metadata": metadata(mp_spdz=mp.describe(), protocol=cfg.protocol,
                             parties=cfg.parties),
        "parameters": {
            "protocol": cfg.protocol, "security": cfg.spec.model, "tamper": cfg.tamper,
            "sharing": cfg.sharing,
            "parties": cfg.parties, "clients": work.n, "dim": d, "rows": m, "sparsity": s,
            "dense": cfg.dense, "program": cfg.program, "input": cfg.input_mode,
            "frac_bits": cfg.frac_bits, "seed": cfg.seed,
            "data": str(cfg.data) if cfg.data else "synthetic",
            "hosts": str(cfg.hosts) if cfg.hosts else "local",
            "network": cfg.network or "loopback",
            "noise": work.noise.describe(),
            "layout": {"kind": work.layout.kind, "block_rows": work.layout.block_rows,
                       "chunk_blocks": work.layout.chunk_blocks,
                       "file_rows": work.layout.total_rows,
                       "padding_rows": work.layout.total_rows - work.layout.real_rows},
            **cfg.extra,
        },
        "parties": parties,
        "t_mpc_s": t_mpc,
        **end_to_end(timings, t_mpc),
        "inputs_reused": inputs is not None,
        "global_data_sent_mb": global_mb,
        "client_upload_bytes": upload,
        "c_mpc_mb": sum(upload) / 1e6 + global_mb,
        "model_c_mpc_mb": cfg.parties * 8 * (s * work.n * d + m * d) / 1e6,
        "model_client_upload_mb": upload_model_mb(cfg, s * work.n * d),
        "verification": {"ok": mismatches == 0, "mismatches": mismatches, "entries": m * d,
                         "method": "revealed ring elements equal sum_i S_i enc(A + G_i) "
                                   "mod 2^64, computed with numpy from the same encoding"},
        "noise_observed": prepared.stats,
        "timings": timings,
        "_revealed": revealed,
    }
    if keep_inputs:
        result["_inputs"] = ServerInputs(cluster, prepared, uploaded, expand_s)
    return result


def deliver(cfg: RunConfig, work: Workload, cluster) -> tuple[dict | None, list | None]:
    """The clients' files to the servers, and the servers' expansion of any seeds.

    Returns the upload per party (measured where it crosses an emulated network;
    else None, the files being in place) and each server's ``expand_s`` when it
    was timed here (on hosts it comes back with the parties' statistics).
    """
    uploaded = expand_s = None
    if cfg.input_mode == "shares" and isinstance(cluster, LocalCluster):
        uploaded = cluster.upload(cfg.timeout)
    if cfg.sharing == "seeded" and cfg.hosts is None:
        # Each server expands its own seeds (on separate machines, at the same time).
        expand_s = [expand_party(i, cluster.party_dir(i), cluster.share_file(i), work.layout,
                                 cfg.share_format, cfg.parties, work.n, work.sketch.s)
                    for i in range(cfg.parties)]
    elif cfg.sharing == "seeded":  # on each server's host, before any aggregation
        cluster.expand_on_hosts(work.layout, cfg.share_format, work.n, work.sketch.s)
    return uploaded, expand_s


def network_session(cluster) -> contextlib.AbstractContextManager:
    """The emulated network of a local cluster, if any, kept up for what runs inside."""
    if isinstance(cluster, LocalCluster):
        return cluster.network_session()
    return contextlib.nullcontext()


def end_to_end(timings: dict, t_mpc: float) -> dict:
    """T_end_to_end = prepare + upload + expand + T_MPC, each as measured.

    The upload is measured only when it crosses a network (an emulated one, or a
    [client] host's); otherwise the share files are written in place and it is
    counted as 0 s, which ``upload_measured`` says.
    """
    upload = timings.get("client_upload_s")
    total = (timings["prepare_s"] + (upload or 0.0) + timings.get("expand_s", 0.0) + t_mpc)
    return {"t_end_to_end_s": total, "upload_measured": upload is not None}


def upload_model_mb(cfg: RunConfig, values: int) -> float:
    """What the clients must upload: every server's words of every noisy value."""
    if cfg.input_mode == "party":
        return 8 * values / 1e6  # the data owner's plaintext rows, to party 0
    return cfg.parties * cfg.share_format.words * 8 * values / 1e6


def raise_if_detected(spec: Protocol, exc: PartyError, workdir: Path) -> None:
    """A malicious protocol's abort on a failed check, as one line; else nothing."""
    if not spec.malicious:
        return
    from harness.engine import detected_tampering

    texts = [(str(exc.party), exc.stderr)]
    texts += [(log.stem, log.read_text(errors="replace"))
              for log in sorted((workdir / "logs").glob("*.stderr"))]
    for who, text in texts:
        said = detected_tampering(text or "")
        if said:
            raise TamperDetectedError(
                f"the servers detected tampering: {spec.name} aborted before revealing the "
                f"sketch ({who}: {said!r}); no output was produced") from exc


def end_to_end_parts(result: dict) -> str:
    t = result["timings"]
    upload = (f"upload {t['client_upload_s']:.3f}" if result["upload_measured"]
              else "upload 0 (files written in place)")
    parts = [f"prepare {t['prepare_s']:.3f}", upload]
    if "expand_s" in t:
        parts.append(f"expand {t['expand_s']:.3f}")
    parts.append(f"T_MPC {result['t_mpc_s']:.3f}")
    return " + ".join(parts)


def summary(result: dict, out: Path) -> str:
    p = result["parameters"]
    lines = [
        f"ltm run: {p['program']} program, {p['protocol']} ({p['security']}), "
        f"{p['parties']} parties, n={p['clients']} d={p['dim']}"
        f" m={p['rows']} s={p['sparsity']}, noise {p['noise']['kind']}",
        f"  verified: {'yes, bit-exact' if result['verification']['ok'] else 'NO'}",
        f"  T_MPC {result['t_mpc_s']:.3f} s (slowest party); C_MPC {result['c_mpc_mb']:.3f} MB "
        f"(model {result['model_c_mpc_mb']:.3f} MB)",
        f"  client upload {sum(result['client_upload_bytes']) / 1e6:.3f} MB (model for "
        f"{p['protocol']}: {result['model_client_upload_mb']:.3f} MB)",
        f"  T_end_to_end {result['t_end_to_end_s']:.3f} s = {end_to_end_parts(result)}",
    ]
    for party in result["parties"]:
        lines.append(f"  P{party['party']}: time {party['time_s']:.3f} s, sent "
                     f"{party['data_sent_mb']:.3f} MB in {party['rounds']} rounds")
    if p["noise"].get("zero_output"):
        lines.append("  note: n <= 8 m ln(dm/delta) + s + t', so R_D sent zeros (see the paper)")
    lines.append(f"  results in {out}")
    return "\n".join(lines)

