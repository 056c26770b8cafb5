"""``ltm reproduce``: the paper's Tables 3-5 as sweeps that survive interruption.

A sweep directory holds ``sweep.json`` (the settings that must not change
between resumptions) and ``raw.jsonl`` (one row per party per finished
repetition). Every repetition is appended and flushed as soon as it is
verified, as one write, so an interrupted sweep loses at most the repetition in
flight; a rerun of the same command skips what ``raw.jsonl`` already holds.
The tables, plots and ``report.md`` are rebuilt from ``raw.jsonl`` at the end;
reading, checking and healing it is :mod:`.raw`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from harness.engine import (
    CompiledProgram,
    MpSpdz,
    ensure_mpspdz,
    protocol_for,
)
from harness.errors import InputError, LtmError, VerificationError
from harness.experiments import report
from harness.experiments.config import ReproduceConfig, RunConfig
from harness.experiments.execute import RunOutcome, ServerInputs, execute
from harness.experiments.memory import PeakMemory
from harness.experiments.mpc_time import CENTRAL_NS_PER_COIN, VALIDATE_NS, mpc_seconds
from harness.experiments.placement import check_placement, check_protocol_usable
from harness.experiments.raw import completed, heal, load_raw, repetition_rows
from harness.experiments.results import (
    FORMAT_VERSION,
    machine_info,
    metadata,
    migrate_sweep_settings,
    write_json_atomic,
)
from harness.experiments.sweep_data import SketchUtility, utility_data
from harness.experiments.sweeps import Cell, expand, load_spec
from harness.experiments.workload import (
    Workload,
    build_workload,
    check_fits,
    mechanism_for,
    noise_for,
    program_for,
)
from harness.fileio import output_lock
from harness.privacy import DEFAULT_MECHANISM

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ReproduceConfig", "SketchUtility", "reproduce", "load_raw", "plan_sweep",
           "RAW_FILE", "SWEEP_FILE"]

RAW_FILE = "raw.jsonl"
SWEEP_FILE = "sweep.json"
# spdz2k's party input, measured with MP-SPDZ v0.4.2 on a 2-core x86-64 VM (November
# 2026): 2 parties each inputting 100,000 values took 1.84 s and sent 222 MB. Party input
# of every noisy value costs that per 200,000 values; above this many it is left out.
_SPDZ2K_PARTY_INPUT_MAX = 200_000
# A central cell whose MPC should take longer than this (the estimate's per-coin cost,
# harness.experiments.estimate) is left out, its expected time given.
_CENTRAL_RUN_MAX_S = 3600.0
# A validated cell (the validation sweep's) whose MPC should take longer than this is
# left out likewise.
_VALIDATED_RUN_MAX_S = 600.0
# A cell whose run should take longer than this runs once, whatever the repetitions
# asked: its one run's T_MPC varies far less than the minutes it costs, and the report
# says which cells ran once.
_ONE_REPETITION_S = 600.0


@dataclass(frozen=True)
class _Task:
    cell: Cell
    repetition: int


def reproduce(cfg: ReproduceConfig, *, echo: Callable[[str], None] | None = None,
              utility: SketchUtility | None = None) -> Path:
    """Run (or resume) the sweeps, then write the tables, plots and report.

    ``utility``: for a spec with ``[utility]`` (the mechanisms sweep), the data its runs
    sketch and the analyst's errors of each revealed sketch; without it such a sweep
    runs on the synthetic rows and its errors are not measured.
    """
    tables = cfg.validate()
    # Held for the whole sweep: two sweeps appending to one raw.jsonl corrupt it for good.
    with output_lock(cfg.out):
        return _reproduce_locked(cfg, tables, echo, utility)


def plan_sweep(cfg: ReproduceConfig, tables: list[str], mp: MpSpdz | None = None,
               once: dict[str, dict[str, list[str]]] | None = None
               ) -> tuple[list[tuple[Cell, int]], dict[str, dict[str, list[str]]]]:
    """The cells that run, each with its repetitions, and why the others are left out.

    A per-protocol sweep's cell whose run should take over :data:`_ONE_REPETITION_S`
    runs once; ``once``, if given, collects those as the left-out ones are. Without
    ``mp`` (an estimate, on any machine) whether this MP-SPDZ build has a protocol's
    binary is not asked.
    """
    cells = []
    left_out: dict[str, dict[str, list[str]]] = {}  # "protocol program" -> reason -> points
    for table in tables:
        spec = load_spec(table)
        repeat = cfg.repeat or spec.repeat
        for cell in expand(spec, cfg.scale):
            why = _left_out(cfg, cell, mp)
            what, point = cell.left_out_keys
            if why:
                left_out.setdefault(what, {}).setdefault(why, []).append(point)
                continue
            expected = _expected_mpc_s(cfg, cell) if cell.protocol else 0.0
            if expected > _ONE_REPETITION_S and repeat > 1:
                if once is not None:
                    once.setdefault(what, {}).setdefault(
                        f"a run should take about {expected / 60:.0f} minutes, over "
                        f"{_ONE_REPETITION_S / 60:g}", []).append(point)
                cells.append((cell, 1))
                continue
            cells.append((cell, repeat))
    return cells, left_out


def _reproduce_locked(cfg: ReproduceConfig, tables: list[str],
                      echo: Callable[[str], None] | None,
                      utility: SketchUtility | None) -> Path:
    mp = ensure_mpspdz(cfg.mp_spdz, auto_install=cfg.install_mpspdz)
    once: dict[str, dict[str, list[str]]] = {}
    cells, left_out = plan_sweep(cfg, tables, mp, once)
    plan = [_Task(cell, r) for cell, repeat in cells for r in range(repeat)]
    if not plan:
        raise InputError("nothing of this sweep can run here: " + "; ".join(
            f"{k}: {'; '.join(v)}" for k, v in left_out.items()))
    needed = max(t.cell.servers for t in plan)
    for cell in {t.cell for t in plan}:  # before sweep.json is written
        cell_cfg = _run_config(cfg, cell, Path(cfg.out))
        check_fits(cell_cfg.validate(), cell.clients, cell.dim, cell.sparsity)
        # every cell's noise certified before the first is drawn
        noise_for(cell_cfg, cell.clients, cell.dim, cell.sparsity)
    check_placement(_run_config(cfg, plan[0].cell, Path(cfg.out), parties=needed))
    out = Path(cfg.out)
    _open_sweep(out, cfg, mp)
    raw_path = out / RAW_FILE
    done = heal(raw_path)
    todo = [t for t in plan if (t.cell.key, t.repetition) not in done]
    if echo and len(todo) < len(plan):
        echo(f"ltm reproduce: resuming in {out}: {len(plan) - len(todo)} of {len(plan)} "
             "repetitions already done")
    try:
        _sweep(cfg, mp, todo, raw_path, out, utility)
    except KeyboardInterrupt:
        if echo:
            echo(f"ltm reproduce: interrupted; finished repetitions are kept in {raw_path}. "
                 "Run the same command again to resume.")
        raise
    finished = completed(raw_path)
    missing = [t for t in plan if (t.cell.key, t.repetition) not in finished]
    if missing:
        # Success means every cell complete, never a table with holes in it.
        raise LtmError(f"{len(missing)} of {len(plan)} repetitions are missing from {raw_path} "
                       f"(the first: {missing[0].cell.key} repetition "
                       f"{missing[0].repetition + 1}); run the same command again to finish")
    settings = {**cfg.identity(), "repeat": cfg.repeat or "the spec's", "tables": tables}
    if left_out:
        settings["left out"] = left_out
    if once:
        settings["run once"] = once
    written = report.write_all(load_raw(raw_path), tables, out, machine=machine_info(),
                               settings=settings)
    if echo:
        for table in tables:
            if load_spec(table).validations:
                echo(report.validation_headline(report.summarize_validation(
                    load_raw(raw_path), table, left_out)).rstrip())
            if load_spec(table).mechanisms:
                echo(report.headline(report.summarize_mechanisms(
                    load_raw(raw_path), table, left_out)).rstrip())
    if echo:
        echo(f"ltm reproduce: {len(plan)} repetitions verified; wrote "
             + ", ".join(p.name for p in written) + f" in {out}")
    return out


def _sweep(cfg: ReproduceConfig, mp: MpSpdz, todo: list[_Task], raw_path: Path,
           out: Path, utility: SketchUtility | None = None) -> None:
    workroot = out / ".work"
    bar = tqdm(total=len(todo), unit="rep", disable=not cfg.progress or not todo,
               file=sys.stderr, dynamic_ncols=True, mininterval=0.5)
    try:
        current: Cell | None = None
        state: _CellState | None = None
        inputs: ServerInputs | None = None
        for task in todo:
            spec = load_spec(task.cell.table)
            whole = spec.whole_runs
            bar.set_description(f"{task.cell.label} rep {task.repetition + 1}")
            if whole:
                # The last run's workload and inputs go before this one's are built:
                # held side by side they would count in this run's peak.
                state = inputs = None
                gc.collect()
            peak = PeakMemory() if whole else None
            started = time.perf_counter()
            with peak or contextlib.nullcontext():
                if task.cell != current or whole:
                    current = task.cell
                    state = inputs = None  # a new cell: the clients prepare anew
                    state = _CellState.build(cfg, mp, current, workroot,
                                             utility if spec.utility else None,
                                             spec.utility[0] if spec.utility else 1)
                assert state is not None
                # With the analyst's errors measured, each repetition draws the clients'
                # noise anew: rerun on one cell's shares, the LTM's would repeat one draw.
                outcome = _execute(cfg, mp, state, workroot, inputs,
                                   keep=cfg.reuses_inputs and not whole and not spec.utility)
            inputs = outcome.inputs
            result = outcome.result
            if not result.verification.ok:
                v = result.verification
                raise VerificationError(
                    f"{task.cell.key} repetition {task.repetition + 1}: the revealed sketch "
                    f"differs from the plaintext computation in {v.mismatches} of "
                    f"{v.entries} entries; the sweep stops here (finished repetitions are "
                    f"kept in {raw_path})")
            measured = {"run_wall_s": time.perf_counter() - started,
                        "peak_pss_bytes": peak.bytes} if peak else {}
            if utility is not None and spec.utility is not None:
                measured.update(state.measure(utility, outcome.revealed, *spec.utility))
            _append(raw_path, repetition_rows(
                result, task.cell, task.repetition, program=task.cell.program or cfg.program,
                network=cfg.network or "none", hosts=str(cfg.hosts) if cfg.hosts else "local",
                scale=cfg.scale, measured=measured))
            bar.update(1)
    finally:
        bar.close()
        shutil.rmtree(workroot, ignore_errors=True)


@dataclass
class _CellState:
    """What a cell's repetitions share: its settings, workload and program."""

    run_cfg: RunConfig
    work: Workload
    program: CompiledProgram

    @classmethod
    def build(cls, cfg: ReproduceConfig, mp: MpSpdz, cell: Cell, workroot: Path,
              utility: SketchUtility | None = None, rank: int = 1) -> _CellState:
        run_cfg = _run_config(cfg, cell, workroot)
        if utility is not None:
            run_cfg = dataclasses.replace(run_cfg, data=utility_data(utility, cell, cfg.seed,
                                                                     workroot, rank))
        run_cfg = run_cfg.validate()
        work = build_workload(run_cfg)
        return cls(run_cfg, work, program_for(mp, run_cfg, work))

    def measure(self, utility: SketchUtility, revealed: np.ndarray, rank: int,
                lam: float) -> dict[str, float]:
        """The analyst's errors of this repetition's revealed sketch on the cell's data."""
        sketch = self.work.decode(revealed) / math.sqrt(self.work.sketch.s)
        return utility.measure(sketch, self.work.data, rank, lam)


def _execute(cfg: ReproduceConfig, mp: MpSpdz, state: _CellState, workroot: Path,
             inputs: ServerInputs | None, *, keep: bool) -> RunOutcome:
    """One repetition in its work directory, removed unless its inputs are kept."""
    workdir = workroot / f"rep-{os.getpid()}"
    if inputs is None:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        outcome = execute(state.run_cfg, mp, state.work, state.program, workdir,
                          inputs=inputs, keep_inputs=keep)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    if outcome.inputs is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome


def _left_out(cfg: ReproduceConfig, cell: Cell, mp: MpSpdz | None) -> str | None:
    """Why a cell of a per-protocol sweep is not run here, or None to run it.

    A table sweep's protocol was checked up front: there nothing is left out.
    """
    run_cfg = _run_config(cfg, cell, Path(cfg.out))
    if not cell.protocol:
        if mp is not None:
            check_protocol_usable(mp, run_cfg.protocol)
        protocol_for(run_cfg.protocol).check_parties(cell.servers)
        return None
    refused = run_cfg.route.refused
    if refused:
        # The table's problem, not its fix: that names options (--input) ltm reproduce
        # does not offer; another sweep of the same table does.
        return (f"{refused.partition('; ')[0]} (--program {run_cfg.program} takes --input "
                f"{run_cfg.mode.input} here; a sweep of the other --sharing measures it)")
    try:
        run_cfg = run_cfg.validate()
        noise = mechanism_for(run_cfg, cell.clients, cell.dim, cell.sparsity)
        # The validation sweep measures psi on its own data, where R_D's zeros at small n
        # are refused: such a cell is left out.
        clients = noise_for(run_cfg, cell.clients, cell.dim, cell.sparsity) \
            if cell.validate else None
    except InputError as exc:
        return str(exc)
    if clients is not None and clients.zero_output:
        return (f"the LTM's client randomizer R_D sends zeros at n = {cell.clients:,} for "
                f"m = {cell.rows} (see the docs page Privacy of the client noise), so psi "
                "would measure nothing; --noise none runs this n")
    if noise.mpc_coins:
        cells = cell.rows * cell.dim
        expected = mpc_seconds(run_cfg.protocol, run_cfg.program,
                               cell.sparsity * cell.clients * cell.dim, noise, cells)
        if expected > _CENTRAL_RUN_MAX_S:
            per_coin = CENTRAL_NS_PER_COIN[run_cfg.protocol]
            return (f"the {noise.name} noise's {noise.mpc_coins:,} coins per cell for {cells:,} "
                    f"cells "
                    f"cost about {per_coin * 1e-6:g} ms a coin under {run_cfg.protocol} "
                    f"(MP-SPDZ v0.4.2 on a 2-core x86-64 VM), about {expected / 3600:.0f} "
                    f"hours a run; run only up to {_CENTRAL_RUN_MAX_S / 3600:g} hour")
    if run_cfg.validation != "none":
        values = cell.sparsity * cell.clients * cell.dim
        expected = mpc_seconds(run_cfg.protocol, run_cfg.program, values,
                               validation=run_cfg.validation)
        if expected > _VALIDATED_RUN_MAX_S:
            per_value = VALIDATE_NS[(run_cfg.protocol, run_cfg.validation)]
            return (f"--validate {run_cfg.validation} costs about {per_value * 1e-3:g} us a "
                    f"value under {run_cfg.protocol} (MP-SPDZ v0.4.2 on a 2-core x86-64 VM), "
                    f"about {expected / 60:.0f} minutes a run; run only up to "
                    f"{_VALIDATED_RUN_MAX_S / 60:g} minutes")
    if run_cfg.protocol == "spdz2k" and run_cfg.input_mode == "party" \
            and cell.sparsity * cell.clients * cell.dim > _SPDZ2K_PARTY_INPUT_MAX:
        return (f"party input of every noisy value under spdz2k costs about 1.84 s and 222 MB "
                f"per 200,000 values (MP-SPDZ v0.4.2 on a 2-core x86-64 VM), i.e. minutes "
                f"and gigabytes per run here; run only up to {_SPDZ2K_PARTY_INPUT_MAX} values")
    if mp is None:
        return None
    try:
        check_protocol_usable(mp, run_cfg.protocol)
    except LtmError as exc:
        return str(exc)
    return None


def _expected_mpc_s(cfg: ReproduceConfig, cell: Cell) -> float:
    """The parties' expected time for one run of ``cell`` (the estimate's model)."""
    run_cfg = _run_config(cfg, cell, Path(cfg.out)).validate()
    noise = mechanism_for(run_cfg, cell.clients, cell.dim, cell.sparsity)
    return mpc_seconds(run_cfg.protocol, run_cfg.program,
                       cell.sparsity * cell.clients * cell.dim, noise, cell.rows * cell.dim,
                       run_cfg.validation)


def _run_config(cfg: ReproduceConfig, cell: Cell, workroot: Path, *,
                parties: int | None = None) -> RunConfig:
    return RunConfig(out=workroot, parties=parties or cell.servers, clients=cell.clients,
                     dim=cell.dim, rows=cell.rows, sparsity=cell.sparsity, noise=cfg.noise,
                     calibration=cfg.calibration_of(load_spec(cell.table)),
                     program=cell.program or cfg.program,
                     protocol=cell.protocol or cfg.protocol, seed=cfg.seed,
                     mp_spdz=cfg.mp_spdz, timeout=cfg.timeout, cache_dir=cfg.cache_dir,
                     hosts=cfg.hosts, network=cfg.network, sharing=cfg.sharing,
                     mechanism=cell.mechanism or DEFAULT_MECHANISM,
                     validation=cell.validate or cfg.validation, poison=cell.poison or None,
                     epsilon=RunConfig.epsilon if cell.epsilon is None else cell.epsilon)


def _append(raw_path: Path, rows: list[dict]) -> None:
    # One write per repetition, flushed to disk: a repetition is in the file
    # whole or not at all (a torn last line is dropped when reading).
    text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    with open(raw_path, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _open_sweep(out: Path, cfg: ReproduceConfig, mp: MpSpdz) -> None:
    """Create the sweep directory, or check that it holds the same sweep."""
    sweep = out / SWEEP_FILE
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory; choose another --out")
    if sweep.exists():
        try:
            recorded = json.loads(sweep.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            raise InputError(f"{sweep} is damaged ({exc}); choose another --out") from None
        if not isinstance(recorded, dict) or not isinstance(recorded.get("settings"), dict):
            raise InputError(f"{sweep} is damaged (it is JSON but has no 'settings' object); "
                             "restore it or choose another --out")
        recorded = migrate_sweep_settings(recorded, str(sweep))
        differs = {k: (recorded.get(k), v) for k, v in cfg.identity().items()
                   if recorded.get(k) != v}
        if differs:
            what = ", ".join(f"{k} {old!r} there, {new!r} now" for k, (old, new) in differs.items())
            raise InputError(f"--out {out} holds a sweep with other settings ({what}); rerun "
                             "with the same settings to resume it, or choose another --out")
        return
    if out.is_dir() and any(out.iterdir()):
        raise InputError(f"--out {out} already holds files that are not a sweep; choose "
                         "another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(sweep, {
        "format_version": FORMAT_VERSION,
        "settings": cfg.identity(),
        "started": metadata(mp_spdz=mp.describe(), protocol=cfg.identity()["protocol"],
                            parties=0),
        "started_unix": time.time(),
    })

