"""The paper's utility figures and Tables 6-7, each reproduced by one call.

Section "Interpolation between Local and Central DP" of the paper (arXiv:2412.00497)
has three figures: psi of low-rank approximation
(``lowrank``: epsilon in {0.1, 0.5} x k in {5, 10}, d = 50), phi of ridge
regression (``ridge``: epsilon in {0.01, 0.03, 0.05, 0.1}, d = 10, lambda = 10,
mu^2 = n) and the same for lambda in {1, 10, 100} (``ridge-lambda``). Each
panel shows the local model, the central model (MOD-SULQ, SSP), the LTM with
Laplace noise and the Gaussian LTM with variance ~ n^-p for the paper's p,
over n = 1000 * 1.5^i, i = 0..16 (the paper prints "1000^{i*1.5}", which would
reach 1000^24 = 10^72), 20 runs per point.

``ridge-m`` is not the paper's: the ridge figure at eps = 0.1 for m in {50,
500, 5000} and without a sketch, which shows that the LTM's plateau falls like
1/m (Theorem linreg's n-independent term), so the paper's curves would need m
growing with n (and, at p = 1, noise below DP).

The default calibration is ``dp``, the (epsilon, delta)-DP LTM; ``experiments``,
the paper's own recipe, is labelled in every title and legend as what it is
(:data:`baselines.EXPERIMENTS_LABEL`).

The grids run on exact sufficient statistics (:mod:`.simulate`, which says
why that is exact and fast): for the synthetic data even the n x d matrix is
never drawn.

The figures use the sparse sketch with s = 1 for the Gaussian LTM and the
dense sketch (s = m, whose sum of components is a matrix of iid random signs)
for the Laplace LTM.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.analyst.figure_grid import (
    DEFAULT_DELTA,
    DEFAULT_M,
    DEFAULT_ROW_NORM,
    FIGURES,
    RIDGE_M_SIZES,
    FigureSpec,
    Panel,
    figure_spec,
    n_values,
)
from harness.analyst.figure_notes import bound_notes, data_bounds, figure_report, indefinite_notes
from harness.analyst.figure_plot import plot_figure
from harness.analyst.mechanisms import mechanism_error, mechanisms, one_blas_thread
from harness.analyst.simulate import Stats, lowrank_stats, ridge_stats, synthetic_stats
from harness.errors import InputError
from harness.fileio import check_output_dir, write_atomic

if TYPE_CHECKING:  # pandas is imported where it is used: `ltm --help` need not load it
    import pandas as pd

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_DELTA",
    "DEFAULT_M",
    "DEFAULT_ROW_NORM",
    "FIGURES",
    "RIDGE_M_SIZES",
    "FigureSpec",
    "Panel",
    "check_figure_outputs",
    "check_writable",
    "figure_spec",
    "n_values",
    "plot_figure",
    "reproduce_figure",
    "run_figure",
    "summarize_runs",
    "write_figure",
]

CSV_COLUMNS = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n", "runs",
               "error_mean", "error_std", "indefinite_runs"]


# --- one figure ---------------------------------------------------------------------

def _panel_stats(spec: FigureSpec, panel: Panel, base: Stats,
                 rng: np.random.Generator) -> Stats:
    """The data of ``panel`` from the Gaussian X of ``base``: low rank k, or regression."""
    if spec.problem != "lowrank":
        return ridge_stats(base, float(base.n), rng)
    if panel.k is None:
        raise InputError(f"panel {panel.name!r} of a low-rank figure needs its rank k")
    return lowrank_stats(base, panel.k, rng)


def run_figure(spec: FigureSpec, *, progress: bool = True) -> pd.DataFrame:
    """Every panel, mechanism, n and run of a figure; one row per run (a DataFrame)."""
    import pandas as pd
    from tqdm import tqdm

    rows: list[dict] = []
    total = len(spec.n) * spec.runs
    with one_blas_thread(), tqdm(total=total, disable=not progress,
                                  desc=f"figure {spec.name}", unit="run") as bar:
        for n in spec.n:
            for run in range(spec.runs):
                bar.set_postfix(n=n, refresh=False)
                seeds = np.random.SeedSequence([spec.seed, n, run]).spawn(2)
                data_rng = np.random.default_rng(seeds[0])
                panel_seeds = seeds[1].spawn(len(spec.panels))
                bases: dict[int, Stats] = {}
                per_k: dict[tuple[int | None, int], Stats] = {}
                for index, panel in enumerate(spec.panels):
                    m = spec.panel_m(panel, n)
                    if m > n:  # more buckets than clients: no sketch to speak of
                        continue
                    # Without a sketch only the Gram is read: draw it with one bucket.
                    rows_key = m if panel.sketch else 1
                    if rows_key not in bases:
                        bases[rows_key] = synthetic_stats(n, spec.d, rows_key, data_rng,
                                                          dense=spec.laplace)
                    if (panel.k, rows_key) not in per_k:
                        per_k[panel.k, rows_key] = _panel_stats(spec, panel, bases[rows_key],
                                                                data_rng)
                    rows += _panel_rows(spec, panel, per_k[panel.k, rows_key], m, n, run,
                                        np.random.default_rng(panel_seeds[index]))
                bar.update()
    return pd.DataFrame(rows)


def _panel_rows(spec: FigureSpec, panel: Panel, stats: Stats, m: int, n: int, run: int,
                rng: np.random.Generator) -> list[dict]:
    rows = []
    for mechanism, p in mechanisms(spec.p_values):
        if mechanism == "ltm-laplace" and not (spec.laplace and panel.sketch):
            continue
        notes: dict = {}
        error = mechanism_error(
            stats, spec.problem, mechanism, epsilon=panel.epsilon, m=m, k=panel.k,
            lam=panel.lam, p=1.0 if p is None else p, privacy=spec.privacy(panel.epsilon),
            calibration=spec.calibration, rng=rng, sketch=panel.sketch, notes=notes)
        rows.append({"figure": spec.name, "panel": panel.name, "epsilon": panel.epsilon,
                     "k": panel.k, "lambda": panel.lam, "mechanism": mechanism, "p": p,
                     "n": n, "run": run, "error": error,
                     "indefinite": bool(notes.get("indefinite", False))})
    return rows


def summarize_runs(frame):
    """Mean and standard deviation over runs: the long CSV of CSV_COLUMNS."""
    keys = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n"]
    summary = (frame.groupby(keys, sort=False, dropna=False)
               .agg(runs=("error", "count"), error_mean=("error", "mean"),
                    error_std=("error", "std"), indefinite_runs=("indefinite", "sum"))
               .reset_index())
    summary["error_std"] = summary["error_std"].fillna(0.0)
    summary["k"] = summary["k"].astype("Int64")
    return summary[CSV_COLUMNS]


def figure_paths(out_dir: str | os.PathLike, spec: FigureSpec) -> dict[str, Path]:
    stem = f"{spec.name}-{spec.calibration}{'-quick' if spec.quick else ''}"
    out = Path(out_dir)
    return {"csv": out / f"{stem}.csv", "plot": out / f"{stem}.png",
            "report": out / f"{stem}.md"}


def check_figure_outputs(out_dir: str | os.PathLike, spec: FigureSpec,
                         force: bool = False) -> dict[str, Path]:
    """The output paths; refuses (before any work) existing files or an unwritable DIR."""
    paths = figure_paths(out_dir, spec)
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise InputError(f"{', '.join(existing)} already exist(s); choose another --out or "
                         "pass --force to overwrite")
    check_writable(Path(out_dir))
    return paths


def check_writable(out: Path) -> None:
    """Refuse an --out that cannot be written, creating nothing: a refusal leaves no DIR.

    An existing directory is probed with a file; a missing one is judged by its
    nearest existing ancestor, and made only when the results are written.
    """
    check_output_dir(out, whole=False)
    if not out.is_dir():
        return
    try:
        probe = out / f".ltm-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cannot write to --out {out}: {exc.strerror or exc}; "
                         "choose a writable directory") from None


def make_output_dir(out: Path) -> None:
    """Create --out once the results are ready to be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create --out {out}: {exc.strerror or exc}; "
                         "choose a writable directory") from None



def write_figure(frame, spec: FigureSpec, out_dir: str | os.PathLike, *, seconds: float = 0.0,
                 force: bool = False, bounds: list[dict] | None = None) -> dict[str, Path]:
    """The long CSV (CSV_COLUMNS), the multi-panel PNG and the report, each written whole
    (``bounds``: the data's, from :func:`data_bounds`, drawn here if not given)."""
    paths = check_figure_outputs(out_dir, spec, force)
    make_output_dir(Path(out_dir))
    summary = summarize_runs(frame)
    bounds = data_bounds(spec) if bounds is None else bounds
    indefinite = indefinite_notes(frame, spec)
    png = io.BytesIO()
    plot_figure(summary, spec, png, notes=bound_notes(spec, bounds))
    write_atomic(paths["csv"], summary.to_csv(index=False))
    write_atomic(paths["plot"], png.getvalue())
    write_atomic(paths["report"], figure_report(summary, spec, seconds, bounds=bounds,
                                                indefinite=indefinite))
    return paths


def reproduce_figure(spec: FigureSpec, out_dir: str | os.PathLike, *, force: bool = False,
                     progress: bool = True) -> tuple[pd.DataFrame, dict[str, Path], float]:
    """Check the outputs, run the whole grid, draw the data's bounds, write everything:
    (summary, paths, seconds), the seconds all of it took."""
    check_figure_outputs(out_dir, spec, force)
    start = time.perf_counter()
    frame = run_figure(spec, progress=progress)
    bounds = data_bounds(spec, progress=progress)
    paths = write_figure(frame, spec, out_dir, seconds=time.perf_counter() - start,
                         force=force, bounds=bounds)
    seconds = time.perf_counter() - start
    return summarize_runs(frame), paths, seconds
