"""``ltm reproduce``: the paper's Tables 3-5 as sweeps that survive interruption.

A sweep directory holds ``sweep.json`` (the settings that must not change
between resumptions) and ``raw.jsonl`` (one row per party per finished
repetition). Every repetition is appended and flushed as soon as it is
verified, as one write, so an interrupted sweep loses at most the repetition in
flight; a rerun of the same command skips what ``raw.jsonl`` already holds.
The tables, plots and ``report.md`` are rebuilt from ``raw.jsonl`` at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from harness.engine.mpspdz import MpSpdz, ensure_mpspdz
from harness.errors import InputError, VerificationError
from harness.experiments import report
from harness.experiments.results import FORMAT_VERSION, machine_info, metadata, write_json_atomic
from harness.experiments.run import (
    PROGRAMS,
    RunConfig,
    build_workload,
    check_placement,
    execute,
    program_for,
    public_input_for,
)
from harness.experiments.sweeps import Cell, expand, load_spec, resolve_tables

__all__ = ["ReproduceConfig", "reproduce", "load_raw", "RAW_FILE", "SWEEP_FILE"]

RAW_FILE = "raw.jsonl"
SWEEP_FILE = "sweep.json"
# Settings that define what a sweep measures: resuming with other values would
# mix incomparable repetitions in one table.
_IDENTITY = ("program", "scale", "network", "hosts", "noise", "seed")


@dataclass
class ReproduceConfig:
    tables: str
    out: Path
    repeat: int | None = None  # default: the spec's (10, as in the paper)
    scale: float = 1.0
    program: str = "fast"
    hosts: Path | None = None
    network: str | None = None
    noise: str = "gaussian"
    seed: int | None = 1  # the public sketch and synthetic data; fixed so cells are comparable
    timeout: float = 3600.0
    mp_spdz: Path | None = None
    cache_dir: Path | None = None
    progress: bool = True
    install_mpspdz: bool = False  # install the release on first use (the CLI's default)

    def identity(self) -> dict:
        return {"program": self.program, "scale": self.scale, "network": self.network or "none",
                "hosts": str(self.hosts) if self.hosts else "local", "noise": self.noise,
                "seed": self.seed}

    def validate(self) -> list[str]:
        tables = resolve_tables(self.tables)
        if self.program not in PROGRAMS:
            raise InputError(f"unknown --program {self.program!r}; choose {', '.join(PROGRAMS)}")
        if self.repeat is not None and self.repeat < 1:
            raise InputError(f"--repeat must be at least 1, got {self.repeat}")
        if not self.scale > 0:
            raise InputError(f"--scale must be positive, got {self.scale}")
        # the same rules as one run's
        RunConfig(out=self.out, program=self.program, hosts=self.hosts, network=self.network,
                  parties=2).validate()
        return tables


@dataclass(frozen=True)
class _Task:
    cell: Cell
    repetition: int


def reproduce(cfg: ReproduceConfig, *, echo: Callable[[str], None] | None = None) -> Path:
    """Run (or resume) the sweeps, then write the tables, plots and report."""
    tables = cfg.validate()
    mp = ensure_mpspdz(cfg.mp_spdz, auto_install=cfg.install_mpspdz)
    mp.binary("semi2k-party.x")
    plan = []
    for table in tables:
        spec = load_spec(table)
        repeat = cfg.repeat or spec.repeat
        plan += [_Task(cell, r) for cell in expand(spec, cfg.scale) for r in range(repeat)]
    needed = max(t.cell.servers for t in plan)
    check_placement(_run_config(cfg, plan[0].cell, Path(cfg.out), parties=needed))
    out = Path(cfg.out)
    _open_sweep(out, cfg, mp)
    raw_path = out / RAW_FILE
    _drop_torn_tail(raw_path)
    done = _completed(raw_path)
    todo = [t for t in plan if (t.cell.key, t.repetition) not in done]
    if echo and len(todo) < len(plan):
        echo(f"ltm reproduce: resuming in {out}: {len(plan) - len(todo)} of {len(plan)} "
             "repetitions already done")
    try:
        _sweep(cfg, mp, todo, raw_path, out)
    except KeyboardInterrupt:
        if echo:
            echo(f"ltm reproduce: interrupted; finished repetitions are kept in {raw_path}. "
                 "Run the same command again to resume.")
        raise
    settings = {**cfg.identity(), "repeat": cfg.repeat or "the spec's", "tables": tables}
    written = report.write_all(load_raw(raw_path), tables, out, machine=machine_info(),
                               settings=settings)
    if echo:
        echo(f"ltm reproduce: {len(plan)} repetitions verified; wrote "
             + ", ".join(p.name for p in written) + f" in {out}")
    return out


def _sweep(cfg: ReproduceConfig, mp: MpSpdz, todo: list[_Task], raw_path: Path,
           out: Path) -> None:
    workroot = out / ".work"
    bar = tqdm(total=len(todo), unit="rep", disable=not cfg.progress or not todo,
               file=sys.stderr, dynamic_ncols=True, mininterval=0.5)
    try:
        current: Cell | None = None
        for task in todo:
            if task.cell != current:
                current = task.cell
                run_cfg = _run_config(cfg, current, workroot)
                run_cfg.validate()
                work = build_workload(run_cfg)
                program = program_for(mp, run_cfg, work)
                schedule = public_input_for(run_cfg, work)
            bar.set_description(f"{task.cell.key} rep {task.repetition + 1}")
            workdir = workroot / f"rep-{os.getpid()}"
            shutil.rmtree(workdir, ignore_errors=True)
            try:
                result = execute(run_cfg, mp, work, program, workdir, schedule)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            result.pop("_revealed")
            if not result["verification"]["ok"]:
                v = result["verification"]
                raise VerificationError(
                    f"{task.cell.key} repetition {task.repetition + 1}: the revealed sketch "
                    f"differs from the plaintext computation in {v['mismatches']} of "
                    f"{v['entries']} entries; the sweep stops here (finished repetitions are "
                    f"kept in {raw_path})")
            _append(raw_path, _rows(cfg, task, result))
            bar.update(1)
    finally:
        bar.close()
        shutil.rmtree(workroot, ignore_errors=True)


def _run_config(cfg: ReproduceConfig, cell: Cell, workroot: Path, *,
                parties: int | None = None) -> RunConfig:
    return RunConfig(out=workroot, parties=parties or cell.servers, clients=cell.clients,
                     dim=cell.dim, rows=cell.rows, sparsity=cell.sparsity, noise=cfg.noise,
                     program=cfg.program, seed=cfg.seed, mp_spdz=cfg.mp_spdz,
                     timeout=cfg.timeout, cache_dir=cfg.cache_dir, hosts=cfg.hosts,
                     network=cfg.network)


def _rows(cfg: ReproduceConfig, task: _Task, result: dict) -> list[dict]:
    cell = task.cell
    meta = {k: v for k, v in result["metadata"].items() if not isinstance(v, dict | list)}
    upload_mb = sum(result["client_upload_bytes"]) / 1e6
    common = {
        "table": cell.table, "variant": cell.variant, "cell": cell.key,
        "servers": cell.servers, "clients": cell.clients, "paper_clients": cell.paper_clients,
        "sparsity": cell.sparsity, "rows": cell.rows, "dim": cell.dim,
        "program": cfg.program, "network": cfg.network or "none",
        "hosts": str(cfg.hosts) if cfg.hosts else "local", "scale": cfg.scale,
        "repetition": task.repetition,
        "t_mpc_s": result["t_mpc_s"], "client_upload_mb": upload_mb,
        "client_upload_s": result["timings"].get("client_upload_s"),
        "c_mpc_mb": result["c_mpc_mb"], "model_c_mpc_mb": result["model_c_mpc_mb"],
        "verified": result["verification"]["ok"],
        "prepare_s": result["timings"]["prepare_s"],
        "format_version": FORMAT_VERSION, **meta,
    }
    keep = ("party", "time_s", "data_sent_mb", "rounds", "global_data_sent_mb", "wall_s",
            "upload_s", "mpc_time_s", "aggregate_s")
    return [{**common, **{k: p[k] for k in keep if k in p}} for p in result["parties"]]


def _append(raw_path: Path, rows: list[dict]) -> None:
    # One write per repetition, flushed to disk: a repetition is in the file
    # whole or not at all (a torn last line is dropped when reading).
    text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    with open(raw_path, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _drop_torn_tail(raw_path: Path) -> None:
    """Cut a last line without its newline (the write a kill interrupted) before appending."""
    if not raw_path.exists():
        return
    with open(raw_path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            fh.truncate(data.rfind(b"\n") + 1)


def load_raw(raw_path: Path) -> pd.DataFrame:
    """Complete repetitions from ``raw.jsonl``, skipping a torn trailing line."""
    rows = _read_rows(raw_path)
    counts = Counter((r["cell"], r["repetition"]) for r in rows)
    whole = [r for r in rows if counts[(r["cell"], r["repetition"])] == r["servers"]]
    return pd.DataFrame(whole)


def _read_rows(raw_path: Path) -> list[dict]:
    if not raw_path.exists():
        return []
    rows = []
    with open(raw_path) as fh:
        lines = fh.read().split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number >= len(lines) - 1:
                continue  # the write in flight when the sweep was killed
            raise InputError(f"{raw_path}: line {number} is not JSON; the raw results are "
                             "damaged: restore the file or start a new sweep with another --out"
                             ) from None
    return rows


def _completed(raw_path: Path) -> set[tuple[str, int]]:
    df = load_raw(raw_path)
    if df.empty:
        return set()
    return set(zip(df["cell"], df["repetition"].astype(int), strict=True))


def _open_sweep(out: Path, cfg: ReproduceConfig, mp: MpSpdz) -> None:
    """Create the sweep directory, or check that it holds the same sweep."""
    sweep = out / SWEEP_FILE
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory; choose another --out")
    if sweep.exists():
        try:
            recorded = json.loads(sweep.read_text())["settings"]
        except (ValueError, KeyError) as exc:
            raise InputError(f"{sweep} is damaged ({exc}); choose another --out") from None
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
        "started": metadata(mp_spdz=mp.describe(), protocol="semi2k", parties=0),
        "started_unix": time.time(),
    })

