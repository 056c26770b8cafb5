"""``ltm run``: from client data to a verified, revealed sketch.

Steps: data and sketch, noise calibration, fixed-point encoding and sharing
(or party 0's input file), compile (cached), launch the parties, parse their
statistics, check the revealed sketch bit for bit against the plaintext
computation, write the results. The output directory appears only complete.

The settings and their checks are :mod:`.config`, the workload :mod:`.workload`,
where the parties run :mod:`.placement`, one run on them :mod:`.execute` and the
result's format :mod:`.results`; this module is the command's entry, its output
directory and its summary.
"""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.clients import EXPORT_LIMIT
from harness.engine import MpSpdz, ensure_mpspdz
from harness.errors import VerificationError
from harness.experiments.config import (
    INPUT_MODES,
    PROGRAMS,
    PROTOCOLS,
    SHARINGS,
    RunConfig,
    default_input_mode,
)
from harness.experiments.execute import execute
from harness.experiments.mpc_time import long_run_notice
from harness.experiments.placement import check_placement, check_protocol_usable
from harness.experiments.results import DIAGNOSTICS, RunResult, output_directory
from harness.experiments.workload import Workload, build_workload, check_noise, program_for
from harness.fileio import (
    copy_tree_private,
    open_private,
    output_lock,
    short_writes_as_full_disk,
)
from harness.privacy import DEFAULT_MECHANISM, noise_words

__all__ = ["PROGRAMS", "INPUT_MODES", "PROTOCOLS", "SHARINGS", "RunConfig", "run",
           "default_input_mode", "summary"]


def run(cfg: RunConfig, *, echo: Callable[[str], object] | None = None) -> RunResult:
    """One verified run into ``cfg.out``; its result (also written as result.json)."""
    cfg = cfg.validate()
    check_noise(cfg)  # a run the accountant does not certify is refused first
    # Held to the end: a second run on this --out would replace this one's results.
    with output_lock(cfg.out):
        return _run_locked(cfg, echo)


def _run_locked(cfg: RunConfig, echo: Callable[[str], object] | None) -> RunResult:
    mp = ensure_mpspdz(cfg.mp_spdz, auto_install=cfg.install_mpspdz)
    check_protocol_usable(mp, cfg.protocol)  # fail before any heavy work
    check_placement(cfg)
    work = build_workload(cfg)
    # Before anything long starts: a run that will take long says so, and how to shorten it.
    notice = long_run_notice(cfg.protocol, cfg.program, work.sketch.s * work.n * work.d,
                             work.mechanism, work.sketch.m * work.d, cfg.validation)
    if notice is not None and echo is not None:
        echo(notice)
    with output_directory(Path(cfg.out), force=cfg.force, swept=_say_swept) as staging:
        workdir = staging / "work"
        try:
            result = _run_in(cfg, mp, work, staging, workdir)
        finally:
            if not cfg.keep_work:
                shutil.rmtree(workdir, ignore_errors=True)
        if not result.verification.ok:
            # Keep the evidence, but never as a normal result.
            failed = Path(str(cfg.out) + ".mismatch")
            shutil.rmtree(failed, ignore_errors=True)
            copy_tree_private(staging, failed)
            raise VerificationError(f"{failure(result)}; evidence kept in {failed}")
    if echo:
        echo(summary(result, Path(cfg.out)))
    return result


def _say_swept(path: Path) -> None:
    print(f"removed {path}: the partial output of an earlier run into this --out that "
          "was killed (its work files, shares included)", file=sys.stderr)


def _run_in(cfg: RunConfig, mp: MpSpdz, work: Workload, staging: Path,
            workdir: Path) -> RunResult:
    program = program_for(mp, cfg, work)
    outcome = execute(cfg, mp, work, program, workdir)
    output = work.decode(outcome.revealed) / math.sqrt(work.sketch.s)
    outcome.result.save(staging / "result.json")
    # The sketch is a function of the seed in result.json (Sketch.sparse recomputes
    # it): saved only when asked, as computing and writing it (5 MB at n = 1e6, 5 GB at
    # 1e9) would take longer than the MPC.
    if cfg.export_sketch:
        work.sketch.save(staging / "sketch.npz")
    np.save(staging / "output.npy", output)
    # Synthetic rows are their recorded seed's (`ltm analyze` recomputes them): writing
    # them (80 MB at n = 1e6) would take longer than the MPC. A --data file's rows are
    # copied, as the file may change or go.
    if cfg.data is not None and work.n <= EXPORT_LIMIT:
        with open_private(staging / "data.npy") as fh, \
                short_writes_as_full_disk(staging / "data.npy"):  # the clients' own rows
            np.save(fh, work.data)
    return outcome.result


def validation_line(validation: dict, s: int) -> str:
    """The check of the clients' rows, its bound and what it rejected, in one line."""
    check = validation["check"]
    what = "every entry" if check == "linf" else "each row's norm"
    z = validation["z"]
    noise = (f" (the data's bound plus {z:.2f} times the client noise's standard deviation)"
             if z is not None else " (the data's bound: the rows carry no noise)")
    return (f"validated: {check}, {what} within B = {validation['bound']:.6g}{noise}; "
            f"{validation['rejected_rows']} of the rows rejected ({s} per client); an honest "
            "client is rejected with probability at most 2^-40 in the whole run")


def failure(result: RunResult) -> str:
    """Why a run failed its verification, in words."""
    v = result.verification
    checked = result.validation
    if checked is not None and checked["rejected_rows"] != checked["expected_rejected_rows"]:
        return (f"the MPC rejected {checked['rejected_rows']} rows where the poisoned "
                f"clients sent {checked['expected_rejected_rows']}")
    if v.mismatches or v.noise_check is None:
        return (f"the revealed sketch differs from the plaintext computation in "
                f"{v.mismatches} of {v.entries} entries")
    c = v.noise_check
    if c.get("digest_match") is False:
        return ("the revealed sketch minus the plaintext sketch is not the noise the servers "
                "drew: the sum of their digests of it differs from the release's, so a "
                "server's input or the computation changed after the draw")
    figures = (f": mean z {c['mean_z']:.2f}, variance {c['variance']:.4g} for "
               f"{c['expected_variance']:.4g} (z {c['variance_z']:.2f}), goodness-of-fit p "
               f"{c['gof_p_value']:.3g}" if "mean_z" in c else f" (see {DIAGNOSTICS})")
    return (f"the revealed sketch minus the plaintext sketch is not the "
            f"{result.parameters.mechanism} noise the accountant certified{figures}")


def verified_line(result: RunResult) -> str:
    v = result.verification
    if v.noise_check is None:
        return f"  verified: {'yes, bit-exact' if v.ok else 'NO'}"
    c = v.noise_check
    exact = ", bit-exact with the noise revealed" if c["exact"] else ""
    # What the check can see: the noise's size and shape always; a small change (one
    # word) only where the noise is known, by the servers' digests (dng).
    if c.get("digest_match") is not None:
        exact += ", and exactly the servers' own draws by their digests"
    elif not c["exact"]:
        exact += " (statistical only: a small change, such as one word, hides in the noise)"
    # A record read back from result.json holds no figures of the plaintext.
    figures = (f" (mean z {c['mean_z']:.2f}, variance z {c['variance_z']:.2f}, "
               f"goodness-of-fit p {c['gof_p_value']:.3g})" if "mean_z" in c else "")
    return (f"  verified: {'yes' if v.ok else 'NO'}, the release minus the plaintext sketch "
            f"is the noise{figures}{exact}")


def end_to_end_parts(result: RunResult) -> str:
    t = result.timings
    if "stream_wall_s" in t:  # clients and servers side by side, then the MPC's opening
        after = (result.t_end_to_end_s or 0.0) - t["prepare_s"]
        sent = ""
        if "stream_upload_s" not in t and result.upload_measured:
            # to hosts that have only MP-SPDZ: streamed here into files, then sent
            sent = f" + upload {t['client_upload_s']:.3f}"
            after -= t["client_upload_s"]
        if "stream_servers_s" not in t:  # --input party: no server takes a stream
            return (f"stream {t['prepare_s']:.3f} (the data owner's input text, a chunk "
                    f"at a time){sent} + {_after_stream(result, after)}")
        stages = [f"clients {t['stream_clients_s']:.3f}"]
        if "stream_upload_s" in t:  # through an emulated network
            stages.append(f"upload {t['stream_upload_s']:.3f} "
                          f"({t['stream_upload_bytes'] / 1e6:.1f} MB per server)")
        stages.append(f"servers {t['stream_servers_s']:.3f}")
        if "stream_expand_s" in t:  # seeded: expanding the seeds is part of the servers' time
            stages[-1] += f", expanding {t['stream_expand_s']:.3f}"
        # Above 1x the stages ran at the same time; below, the stream also waited.
        overlap = (f"; their times add up to {t['stream_overlap']:.2f}x the stream's"
                   if "stream_overlap" in t else "")
        return (f"stream {t['prepare_s']:.3f} ({', '.join(stages[:-1])} and {stages[-1]} "
                f"side by side{overlap}){sent} + {_after_stream(result, after)}")
    upload = (f"upload {t['client_upload_s']:.3f}" if result.upload_measured
              else "upload 0 (files written in place)")
    parts = [f"prepare {t['prepare_s']:.3f}", upload]
    if "expand_s" in t:
        parts.append(f"expand {t['expand_s']:.3f}")
    parts.append(f"T_MPC {result.t_mpc_s:.3f}")
    return " + ".join(parts)


def _after_stream(result: RunResult, seconds: float) -> str:
    """The term after a stream: T_MPC itself, unless the servers summed their shares
    inside the stream; then only the MPC that opens those sums, which T_MPC includes;
    or the parties summed the stream as it came (fed), then only what followed it."""
    if any(p.aggregate_s is not None for p in result.parties):  # as execute counts it
        return f"MPC {seconds:.3f} (opening the sums)"
    if any(p.mpc_time_s is not None for p in result.parties):
        return (f"MPC {seconds:.3f} after it (T_MPC {result.t_mpc_s:.3f}: the parties "
                "summed the stream as it came)")
    return f"T_MPC {result.t_mpc_s:.3f}"


def _aggregated(result: RunResult) -> str:
    # A streamed fast run's servers wrote their share files, which the MPC then read.
    if "stream_wall_s" in result.timings and any(p.aggregate_s is not None
                                                  for p in result.parties):
        return ", its aggregation while the shares arrived included"
    return ""


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def privacy_line(privacy: dict) -> str:
    """The summary's privacy line: requested against certified, and the generator."""
    if privacy.get("requested_epsilon") is None:
        return "privacy: none (no noise; nothing is private)"
    mechanism = privacy.get("mechanism", DEFAULT_MECHANISM)
    price = ""
    if privacy.get("std_ratio") is not None:
        price = (f"; {mechanism} noise std {privacy['noise_std']:.4g} per entry, "
                 f"{privacy['std_ratio']:.3f}x the central Gaussian's")
    certified = privacy.get("certified_epsilon")
    shown = "none" if certified is None else f"{certified:.3g}"
    generator = (privacy.get("generator") or "?").split(" (")[0]
    return (f"privacy: requested epsilon {privacy['requested_epsilon']:g}, delta "
            f"{privacy['requested_delta']:g}; certified epsilon {shown} "
            f"({privacy.get('accountant')}); generator {generator}{price}")


def data_line(path: str, n: int, d: int, header: bool | None) -> str:
    """The data a run used: its file, rows and columns, and whether a header was skipped."""
    how = {None: "", True: " (its first line skipped as a header; --no-header reads it as "
                           "a row)",
           False: " (no header line; --header skips the first line)"}[header]
    return f"{path}, {n} rows x {d} columns{how}"


def summary(result: RunResult, out: Path) -> str:
    """What ``ltm run`` prints: the result in a few lines."""
    p = result.parameters
    lines = [
        f"ltm run: {p.program} program, {p.protocol} ({p.security}), "
        f"{p.parties} parties, n={p.clients} d={p.dim}"
        f" m={p.rows} s={p.sparsity}, noise "
        + noise_words(p.mechanism, p.noise),
        verified_line(result),
        f"  T_MPC {result.t_mpc_s:.3f} s (slowest party{_aggregated(result)}); C_MPC "
        f"{result.c_mpc_mb:.3f} MB "
        f"(model {result.model_c_mpc_mb:.3f} MB)",
        f"  client upload {sum(result.client_upload_bytes) / 1e6:.3f} MB (model for "
        f"{p.protocol}: {_figure(result.model_client_upload_mb)} MB)",
        f"  T_end_to_end {_figure(result.t_end_to_end_s)} s = {end_to_end_parts(result)}",
    ]
    if p.data != "synthetic":
        lines.append(f"  data: {data_line(p.data, p.clients, p.dim, p.layout.get('data_header'))}")
    for party in result.parties:
        lines.append(f"  P{party.party}: time {party.time_s:.3f} s, sent "
                     f"{party.data_sent_mb:.3f} MB in {party.rounds} rounds")
    if result.privacy is not None:
        lines.append("  " + privacy_line(result.privacy))
    if p.noise.get("zero_output"):
        lines.append(f"  note: n={p.clients} clients are too few for m={p.rows} sketch rows, so "
                     "the paper's client randomizer R_D sent zeros: the release holds no data "
                     "(it needs n > 8 m ln(dm/delta) + s + t', t' the corrupt clients; use "
                     "more clients or fewer --rows, see the docs page Privacy of the client "
                     "noise)")
    if result.validation is not None:
        lines.append("  " + validation_line(result.validation, p.sparsity))
    if p.poisoned:
        lines.append(f"  poisoned: {len(p.poisoned)} clients sent the largest words the "
                     f"encoding holds ({'rejected' if result.validation else 'counted'})")
    lines.append(f"  results in {out}")
    return "\n".join(lines)

