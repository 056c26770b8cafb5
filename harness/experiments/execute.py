"""One run on a cluster: the clients' inputs, the parties, verification, the result.

:func:`execute` talks to wherever the parties live only through
:class:`harness.engine.Cluster` (launch, prepare, session, run_server_step,
run, upload_bytes, reuses_inputs); :func:`harness.experiments.placement.make_cluster`
chose the kind. It returns a :class:`RunOutcome`: the typed result that is
written, and apart from it what is never written into it (the revealed ring
elements, and the servers' inputs for a caller that reruns on them).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.clients import DIGEST_KEY_BYTES, Prepared, tamper_share_file, tamper_text_file
from harness.engine import (
    OUTPUT_MARKER,
    ClientJob,
    Cluster,
    CompiledProgram,
    MpSpdz,
    PartyRun,
    Protocol,
    build_refusal,
    parse_output,
    parse_rejected,
    party_input_file,
)
from harness.errors import MpSpdzError, PartyError, TamperDetectedError
from harness.experiments.config import RunConfig
from harness.experiments.mpc_time import mpc_progress, mpc_seconds
from harness.experiments.placement import make_cluster
from harness.experiments.results import (
    PartyResult,
    RunParameters,
    RunResult,
    Verification,
    metadata,
)
from harness.experiments.workload import Workload, client_job, upload_model_mb
from harness.privacy import Check, Mechanism

__all__ = ["RunOutcome", "ServerInputs", "execute"]


@dataclass
class ServerInputs:
    """The servers' inputs once the stream is done: their files in ``cluster``, and
    what the stream measured making and delivering them."""

    cluster: Cluster
    job: ClientJob
    prepared: Prepared


@dataclass
class RunOutcome:
    """A run's :class:`RunResult` and what stays out of it: the revealed ring elements
    (m x d uint64) and, when kept, the servers' inputs to run on again."""

    result: RunResult
    revealed: np.ndarray
    inputs: ServerInputs | None = None


def execute(cfg: RunConfig, mp: MpSpdz, work: Workload, program: CompiledProgram,
            workdir: Path, *,
            inputs: ServerInputs | None = None, keep_inputs: bool = False) -> RunOutcome:
    """One complete run in ``workdir``: fresh noise and masks, parties, verification.

    ``cfg`` is a validated config. Nothing is written outside ``workdir``.

    ``keep_inputs`` asks for the servers' inputs as this run left them, kept when
    the cluster can compute on them again (local parties without a network) and
    nothing was tampered with; passed back as ``inputs``, the next run reuses them,
    so the servers compute again on the same shares and the clients' side
    (prepare, upload, expand) is not repeated: its figures are the first run's.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    timings["compile_s"] = program.compile_seconds or 0.0
    # Every run streams: its servers (or data owner) write the program's public
    # schedule as the chunks come, and ``local`` reads none.
    with ExitStack() as held:
        if inputs is None:
            cluster = make_cluster(cfg, mp, workdir)
            job = client_job(cfg, work)
            # Where the parties can wait at their inputs they start now: their start-up
            # then overlaps the clients' rather than following it.
            held.enter_context(cluster.launch(job, program, timeout=cfg.timeout,
                                              port=cfg.port))
            prepared = cluster.prepare(job)
        else:
            cluster, job, prepared = inputs.cluster, inputs.job, inputs.prepared
        timings["prepare_s"] = prepared.seconds
        timings.update(prepared.stages)
        # One session (an emulated network) carries the upload and then the MPC.
        digest = None
        step = work.mechanism.server_step((work.sketch.m, work.d))
        with cluster.session():
            if step is not None:
                # Each server runs the mechanism's step where it runs (on a host, its agent
                # there), and reports the digest of what it input under weights drawn now,
                # for the exact check.
                key = os.urandom(DIGEST_KEY_BYTES)
                digest = (key, cluster.run_server_step(
                    step, after_aggregate=cfg.inputs_aggregates, digest_key=key))
            if cfg.tamper is not None:  # after the upload: a server changes what it received
                tamper_input(cfg, work, cluster)
            launched = time.perf_counter()
            # MP-SPDZ prints nothing until the end: a long run shows its time against
            # the estimate instead.
            expected = mpc_seconds(cfg.protocol, cfg.program, work.sketch.s * work.n * work.d,
                                   work.mechanism, work.sketch.m * work.d, cfg.validation)
            try:
                with mpc_progress(expected):
                    runs = cluster.run(program, timeout=cfg.timeout, port=cfg.port)
            except PartyError as exc:
                raise_if_detected(cfg.spec, exc, cluster.workdir)
                refusal = build_refusal(cfg.protocol, mp.root / cfg.spec.binary, exc.stderr)
                if refusal:
                    raise MpSpdzError(refusal) from exc
                raise
    timings["mpc_wall_s"] = time.perf_counter() - launched
    revealed, check = _verify(runs, prepared.expected, work.mechanism, cfg.reveal_noise,
                              digest)
    mismatches = check.mismatches
    validation = None
    if work.bound is not None:
        validation, wrong = _rejections(runs, work)
        mismatches += wrong
    parties = _party_results(cfg, runs, prepared)
    expand = [p.expand_s for p in parties if p.expand_s is not None]
    if expand:
        timings["expand_s"] = max(expand)
    uploads = [p.upload_s for p in parties if p.upload_s is not None]
    if uploads:
        # The clients send to all servers at once: the upload lasts as long as the slowest.
        timings["client_upload_s"] = max(uploads)
    upload = cluster.upload_bytes(prepared)
    timings["total_s"] = time.perf_counter() - started
    m, d, s = work.sketch.m, work.d, work.sketch.s
    t_mpc = max(p.time_s for p in parties)
    # A streamed run's servers aggregated inside the clients' wall time (prepare_s): its
    # end-to-end adds only the MPC after it, not the aggregation a second time.
    after_stream = (max(p.time_s if p.mpc_time_s is None else p.mpc_time_s for p in parties)
                    if prepared.stages else t_mpc)
    global_mb = max(p.global_data_sent_mb for p in parties)
    measured = timings.get("client_upload_s")
    # A stream that crossed a network (or reached hosts) carried the upload inside it;
    # one that ran here into files (fast, to hosts) is followed by their upload.
    upload_streamed = "stream_upload_s" in timings or (
        "stream_wall_s" in timings and measured is None)
    result = RunResult(
        metadata=metadata(mp_spdz=mp.describe(), protocol=cfg.protocol,
                          parties=cfg.party_count),
        parameters=_parameters(cfg, work, prepared),
        parties=parties,
        t_mpc_s=t_mpc,
        # T_end_to_end = prepare + upload + expand + T_MPC, each as measured. The upload
        # is measured only where it crosses a network; else the share files are written
        # in place and it counts 0 s, which upload_measured says. A streamed run's upload
        # (under --network) ran inside its stream (prepare_s), as its servers' sums did.
        t_end_to_end_s=(timings["prepare_s"] + (0.0 if upload_streamed else measured or 0.0)
                        + timings.get("expand_s", 0.0) + after_stream),
        upload_measured=measured is not None,
        inputs_reused=inputs is not None,
        global_data_sent_mb=global_mb,
        client_upload_bytes=upload,
        c_mpc_mb=sum(upload) / 1e6 + global_mb,
        model_c_mpc_mb=cfg.party_count * 8 * (s * work.n * d + m * d) / 1e6,
        model_client_upload_mb=upload_model_mb(cfg, s * work.n * d),
        verification=_verification(mismatches, m * d, check),
        # Statistics of the noise as released: drawn on the lattice, in reals.
        noise_observed={**prepared.stats, "released": True},
        privacy=work.mechanism.record(),
        timings=timings,
        validation=validation,
    )
    kept = None
    # A server step appends to the servers' inputs (dng's fresh noise): a rerun would read
    # what the step left.
    if keep_inputs and cluster.reuses_inputs and cfg.tamper is None and step is None:
        kept = ServerInputs(cluster, job, prepared)
    return RunOutcome(result, revealed, kept)


def _verify(runs: list[PartyRun], expected: np.ndarray, mechanism: Mechanism,
            reveal_noise: bool = False, digest: tuple[bytes, int] | None = None,
            ) -> tuple[np.ndarray, Check]:
    """P0's revealed ring elements, and the mechanism's check of every party's views
    (every party that printed them: one honest-looking P0 is not enough) against the
    plaintext sketch (and the servers' ``digest``, key and sum, of their step's input)."""
    m, d = expected.shape
    views = mechanism.views(reveal_noise)
    printed = {r.party: parse_output(f"P{r.party}", r.completed.stdout, views * m * d)
               .reshape(views, m, d)
               for r in runs if r.party == 0 or OUTPUT_MARKER in r.completed.stdout}
    return printed[0][0], mechanism.verify(expected, printed, digest)


def _rejections(runs: list[PartyRun], work: Workload) -> tuple[dict, int]:
    """result.json's ``validation``: the bound, and the rows every party saw rejected;
    and 1 if any party's count is not the poisoned clients' rows (an honest run rejects
    none but with probability 2^-40), else 0."""
    assert work.bound is not None
    counts = {r.party: parse_rejected(f"P{r.party}", r.completed.stdout)
              for r in runs if r.party == 0 or OUTPUT_MARKER in r.completed.stdout}
    expected = len(work.poisoned) * work.sketch.s
    record = {**work.bound.record(), "rejected_rows": counts[0],
              "expected_rejected_rows": expected}
    return record, int(any(count != expected for count in counts.values()))


def _verification(mismatches: int, entries: int, check: Check) -> Verification:
    if check.statistics is None:
        return Verification(ok=mismatches == 0, mismatches=mismatches, entries=entries)
    return Verification(ok=mismatches == 0 and check.statistics["ok"], mismatches=mismatches,
                        entries=entries, method=check.method or "", noise_check=check.statistics)


def _party_results(cfg: RunConfig, runs: list[PartyRun], prepared: Prepared) -> list[PartyResult]:
    """Each server's figures: MP-SPDZ's, and the upload, expansion and aggregation where
    they were timed here (else as the server's host reported them in its stats)."""
    parties = []
    for r in runs:
        stats = r.stats
        # T_MPC is the program's own work where it times it (timer 1: fast's, without
        # its waits for a stream it reads as it comes), else MP-SPDZ's whole time.
        row = PartyResult(party=r.party, time_s=stats.get("busy_s", stats["time_s"]),
                          data_sent_mb=stats["data_sent_mb"], rounds=stats["rounds"],
                          global_data_sent_mb=stats["global_data_sent_mb"],
                          wall_s=r.completed.wall_seconds, upload_s=stats.get("upload_s"),
                          expand_s=stats.get("expand_s"), aggregate_s=stats.get("aggregate_s"))
        if "after_stream_s" in stats:  # fed: it summed the stream; what followed it
            row.mpc_time_s = stats["after_stream_s"]
        if prepared.upload is not None:
            row.upload_s = prepared.upload[r.party]["upload_s"]
            row.upload_bytes_sent = prepared.upload[r.party]["upload_bytes_sent"]
        if cfg.server_program.aggregates:
            row.mpc_time_s = row.time_s
            row.aggregate_s = (prepared.servers_s[r.party] if prepared.servers_s is not None
                               else stats["aggregate_s"])
            row.time_s = row.mpc_time_s + row.aggregate_s
        parties.append(row)
    return parties


def _parameters(cfg: RunConfig, work: Workload, prepared: Prepared) -> RunParameters:
    # Grouped per chunk of clients; fast's and reference's servers wrote files of it.
    layout: dict = {"kind": "streamed", **prepared.layout}
    # The seed the sketch (and synthetic data) came from, drawn when --seed was not given.
    layout["sketch_seed"] = work.seed
    if cfg.data is None:  # uniform in [-eta, eta] from that seed: recomputable from these
        layout["synthetic_eta"] = cfg.eta
    elif work.header is not None:  # how a text file was read: its first line skipped?
        layout["data_header"] = work.header
    return RunParameters(
        protocol=cfg.protocol, security=cfg.spec.model, tamper=cfg.tamper, sharing=cfg.sharing,
        parties=cfg.party_count, clients=work.n, dim=work.d, rows=work.sketch.m,
        sparsity=work.sketch.s, dense=cfg.dense, program=cfg.program, input=cfg.input_kind,
        frac_bits=cfg.frac_bits, seed=cfg.seed,
        data=str(cfg.data) if cfg.data else "synthetic",
        hosts=str(cfg.hosts) if cfg.hosts else "local", network=cfg.network or "loopback",
        noise=work.noise.describe(), layout=layout, mechanism=cfg.mechanism,
        validate=cfg.validation, poisoned=list(work.poisoned))


def tamper_input(cfg: RunConfig, work: Workload, cluster: Cluster) -> None:
    """Change one word of party ``cfg.tamper``'s input to the MPC (``--tamper``).

    The first word of the first real share: under a replicated sharing that is
    a_i, the word the party's neighbour also holds, so a malicious protocol can
    notice; padding rows are never revealed, so changing one would prove nothing.
    """
    party = cfg.tamper
    if party is None:
        return
    if cfg.inputs_aggregates:
        tamper_text_file(party_input_file(cluster.party_dir(party), party))
        return
    # An aggregated file holds the m x d accumulators, a row-per-slot one no padding, and
    # a file laid out per chunk of clients starts with a real row (a block's first is).
    tamper_share_file(cluster.share_file(party), cfg.share_format, 0)


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
