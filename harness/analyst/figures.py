"""The paper's utility figures and Tables 6-7, each reproduced by one call.

Section "Interpolation between Local and Central DP" (secure-sketching.tex,
lines ~1120-1275) has three figures: psi of low-rank approximation
(``lowrank``: epsilon in {0.1, 0.5} x k in {5, 10}, d = 50), phi of ridge
regression (``ridge``: epsilon in {0.01, 0.03, 0.05, 0.1}, d = 10, lambda = 10,
mu^2 = n) and the same for lambda in {1, 10, 100} (``ridge-lambda``). Each
panel shows the local model, the central model (MOD-SULQ, SSP), the LTM with
Laplace noise and the Gaussian LTM with variance ~ n^-p for the paper's p,
over n = 1000 * 1.5^i, i = 0..16 (the paper prints "1000^{i*1.5}", which would
reach 1000^24 = 10^72), 20 runs per point.

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
import math
import os
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.analyst import baselines
from harness.analyst.mechanisms import mechanism_error, mechanisms, one_blas_thread
from harness.analyst.simulate import Stats, lowrank_stats, ridge_stats, synthetic_stats
from harness.errors import InputError, check_number
from harness.fileio import check_output_dir, write_atomic

if TYPE_CHECKING:  # pandas is imported where it is used: `ltm --help` need not load it
    import pandas as pd

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_DELTA",
    "DEFAULT_M",
    "FIGURES",
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

FIGURES = ("lowrank", "ridge", "ridge-lambda")
CSV_COLUMNS = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n", "runs",
               "error_mean", "error_std"]
# Colours of the paper's captions: grey local, blue central, orange Gaussian LTM
# (p = 1), lime Laplace LTM.
COLOURS = {"local": "grey", "central": "tab:blue", "ltm-gaussian": "tab:orange",
           "ltm-laplace": "lime"}

# The sketch size, sparsity and delta the paper never states for its figures.
DEFAULT_M = 50
DEFAULT_DELTA = 1e-6
# Rows of l2 norm <= 1, MOD-SULQ's convention; the synthetic low-rank rows have
# mean squared norm exactly 1. The paper does not clip its data either.
DEFAULT_ROW_NORM = 1.0


@dataclass(frozen=True)
class Panel:
    """One subplot: its place in the grid and the parameters that vary between panels."""

    name: str
    row: int
    col: int
    epsilon: float
    k: int | None = None
    lam: float | None = None


@dataclass(frozen=True)
class FigureSpec:
    name: str
    problem: str  # "lowrank" or "ridge"
    d: int
    panels: tuple[Panel, ...]
    n: tuple[int, ...]
    runs: int = 20
    m: int = DEFAULT_M
    s: int = 1
    delta: float = DEFAULT_DELTA
    eta: float = 1.0
    row_norm: float | None = DEFAULT_ROW_NORM
    calibration: str = "dp"
    p_values: tuple[float, ...] = baselines.P_VALUES
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        baselines.check_calibration(self.calibration)
        if int(self.runs) != self.runs or self.runs < 2:
            raise InputError(f"--runs must be an integer >= 2 (a standard deviation needs two "
                             f"runs), got {self.runs}")
        if self.s != 1:
            raise InputError("the figures use the sparse sketch with s = 1")

    @property
    def columns(self) -> int:
        return self.d + 1 if self.problem == "ridge" else self.d

    @property
    def metric(self) -> str:
        return "psi" if self.problem == "lowrank" else "phi"

    @property
    def grid(self) -> tuple[int, int]:
        return (max(p.row for p in self.panels) + 1, max(p.col for p in self.panels) + 1)

    def privacy(self, epsilon: float) -> baselines.Privacy:
        return baselines.Privacy(epsilon, self.delta, self.eta, row_norm=self.row_norm)

    def describe(self) -> dict:
        return {"figure": self.name, "problem": self.problem, "metric": self.metric,
                "calibration": self.calibration, "d": self.d, "m": self.m, "s": self.s,
                "delta": self.delta, "eta": self.eta, "row_norm": self.row_norm,
                "runs": self.runs, "n": list(self.n), "p_values": list(self.p_values),
                "seed": self.seed, "quick": self.quick}


def n_values(m: int, quick: bool = False) -> tuple[int, ...]:
    """n = 1000 * 1.5^i for i = 0..16, rounded to multiples of m (the dense sketch's)."""
    steps = range(0, 17, 8) if quick else range(17)
    return tuple(max(m, int(round(1000 * 1.5**i / m)) * m) for i in steps)


def figure_spec(name: str, *, quick: bool = False, runs: int | None = None,
                calibration: str = "dp", seed: int = 0, m: int = DEFAULT_M) -> FigureSpec:
    """The grid of one of the paper's figures (``--quick``: three n, three runs)."""
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r}; choose one of {', '.join(FIGURES)}")
    check_number("--m", m, low=1, integer=True)  # n_values divides by it
    runs = runs if runs is not None else (3 if quick else 20)
    common: dict[str, Any] = dict(runs=runs, calibration=calibration, seed=seed,
                                  quick=quick, m=m, n=n_values(m, quick))
    if name == "lowrank":
        panels = tuple(Panel(f"eps={e:g}, k={k}", r, c, e, k=k)
                       for r, e in enumerate((0.1, 0.5)) for c, k in enumerate((5, 10)))
        return FigureSpec(name, "lowrank", 50, panels, **common)
    eps = (0.01, 0.03, 0.05, 0.1)
    if name == "ridge":
        panels = tuple(Panel(f"eps={e:g}, lambda=10", i // 2, i % 2, e, lam=10.0)
                       for i, e in enumerate(eps))
    else:
        panels = tuple(Panel(f"eps={e:g}, lambda={lam:g}", r, c, e, lam=lam)
                       for r, e in enumerate(eps) for c, lam in enumerate((1.0, 10.0, 100.0)))
    return FigureSpec(name, "ridge", 10, panels, **common)


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
                base = synthetic_stats(n, spec.d, spec.m, data_rng)
                per_k: dict[int | None, Stats] = {}
                panel_seeds = seeds[1].spawn(len(spec.panels))
                for index, panel in enumerate(spec.panels):
                    if panel.k not in per_k:
                        per_k[panel.k] = _panel_stats(spec, panel, base, data_rng)
                    stats = per_k[panel.k]
                    rng = np.random.default_rng(panel_seeds[index])
                    for mechanism, p in mechanisms(spec.p_values):
                        error = mechanism_error(
                            stats, spec.problem, mechanism, epsilon=panel.epsilon, m=spec.m,
                            k=panel.k, lam=panel.lam, p=1.0 if p is None else p,
                            privacy=spec.privacy(panel.epsilon), calibration=spec.calibration,
                            rng=rng)
                        rows.append({"figure": spec.name, "panel": panel.name,
                                     "epsilon": panel.epsilon, "k": panel.k,
                                     "lambda": panel.lam, "mechanism": mechanism, "p": p,
                                     "n": n, "run": run, "error": error})
                bar.update()
    return pd.DataFrame(rows)


def summarize_runs(frame):
    """Mean and standard deviation over runs: the long CSV of CSV_COLUMNS."""
    keys = ["figure", "panel", "epsilon", "k", "lambda", "mechanism", "p", "n"]
    summary = (frame.groupby(keys, sort=False, dropna=False)["error"]
               .agg(runs="count", error_mean="mean", error_std="std").reset_index())
    summary["error_std"] = summary["error_std"].fillna(0.0)
    summary["k"] = summary["k"].astype("Int64")
    return summary[CSV_COLUMNS]


def _label(mechanism: str, p, calibration: str = "dp") -> str:
    recipe = f", {baselines.EXPERIMENTS_LABEL}" if calibration == "experiments" else ""
    if mechanism == "ltm-gaussian":
        return f"LTM Gaussian (p=1){recipe}" if p == 1 else f"Gaussian p={p:g}"
    if mechanism == "ltm-laplace":
        return f"LTM Laplace{recipe}"
    return {"local": "local", "central": "central"}[mechanism]


def _style(mechanism: str, p) -> dict:
    if mechanism != "ltm-gaussian" or p == 1:
        return {"color": COLOURS[mechanism], "linewidth": 2.0}
    from matplotlib import colormaps

    # p < 1 between the LTM (orange) and the local model (grey): a colour map no
    # fixed curve uses, darker as p falls towards the local model.
    return {"color": colormaps["RdPu"](0.35 + 0.6 * (1.0 - p)), "linewidth": 1.0,
            "linestyle": "--"}


def plot_figure(summary, spec: FigureSpec, path) -> None:
    """One subplot per panel in the paper's layout, log-x, mean with std bars, one legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows, cols = spec.grid
    recipe = spec.calibration == "experiments"
    legend = 1.15 + (0.8 if recipe else 0.0)  # the recipe's labels take two lines each
    height = 3.2 * rows + legend + 0.05
    fig = Figure(figsize=(4.2 * cols, height))
    FigureCanvasAgg(fig)
    # Fixed margins: constrained layout measures every log-axis tick label and takes
    # seconds per panel.
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=legend / height,
                        hspace=0.45, wspace=0.28)
    axes = fig.subplots(rows, cols, squeeze=False)
    handles: dict[str, Any] = {}
    for panel in spec.panels:
        ax = axes[panel.row][panel.col]
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            p = None if p is None or (isinstance(p, float) and math.isnan(p)) else p
            mean, std = curve["error_mean"].to_numpy(), curve["error_std"].to_numpy()
            lower = np.minimum(std, np.where(mean > 0, mean * 0.999, std))
            handle = ax.errorbar(curve["n"], mean, yerr=[lower, std], capsize=2,
                                 ecolor="black", elinewidth=0.6, **_style(mechanism, p))
            handles.setdefault(_label(mechanism, p, spec.calibration), handle)
        ax.set_xscale("log")
        if len(part) and (part["error_mean"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(panel.name, fontsize="medium")
        ax.set_xlabel("number of clients n")
        ax.set_ylabel(spec.metric)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{spec.name}: {spec.metric} against n (d={spec.d}, m={spec.m}, s={spec.s}, "
                 f"delta={spec.delta:g}, {spec.runs} runs)\n"
                 f"calibration={baselines.calibration_label(spec.calibration)}",
                 fontsize="medium", y=1 - 0.1 / height)
    labels = [textwrap.fill(label, 42) for label in handles]
    fig.legend(list(handles.values()), labels, loc="lower center",
               ncol=min(3 if recipe else 5, len(handles)), fontsize="small", frameon=False)
    fig.savefig(path, dpi=110, format="png")


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


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def figure_report(summary, spec: FigureSpec, seconds: float) -> str:
    """A short markdown report: the settings and, per panel, each curve's first and last n."""
    lines = [f"# Figure `{spec.name}` ({spec.metric}), calibration `{spec.calibration}`", "",
             f"Calibration: {baselines.calibration_label(spec.calibration)}.", ""]
    d = spec.describe()
    lines += [f"- settings the paper states: d = {spec.d}, n = 1000 * 1.5^i "
              f"({len(spec.n)} values, {spec.n[0]} .. {spec.n[-1]}), {spec.runs} runs per "
              f"point, p in {{{', '.join(f'{p:g}' for p in spec.p_values)}}}",
              f"- settings it does not state (chosen here): m = {spec.m}, s = {spec.s} "
              f"(Gaussian LTM; the Laplace LTM uses the dense sketch, s = m), "
              f"delta = {spec.delta:g}, row-norm bound R = {d['row_norm']} "
              "(l2 sensitivity 2R for the local model, MOD-SULQ's and SSP's row bound), "
              f"seed {spec.seed}",
              f"- run time: {seconds:.0f} s" + (" (quick grid, not the paper's)"
                                                if spec.quick else ""), ""]
    small, large = min(spec.n), max(spec.n)
    lines += [f"| panel | mechanism | p | {spec.metric} at n={small} | "
              f"{spec.metric} at n={large} | last/first |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for panel in spec.panels:
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            first = curve[curve["n"] == small].iloc[0]
            last = curve[curve["n"] == large].iloc[0]
            ratio = last["error_mean"] / first["error_mean"] if first["error_mean"] else math.nan
            p_text = "" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:g}"
            lines.append(f"| {panel.name} | {mechanism} | {p_text} | "
                         f"{_fmt(first['error_mean'])} +- {_fmt(first['error_std'])} | "
                         f"{_fmt(last['error_mean'])} +- {_fmt(last['error_std'])} | "
                         f"{_fmt(ratio)} |")
    return "\n".join(lines) + "\n"


def write_figure(frame, spec: FigureSpec, out_dir: str | os.PathLike, *, seconds: float = 0.0,
                 force: bool = False) -> dict[str, Path]:
    """The long CSV (CSV_COLUMNS), the multi-panel PNG and the report, each written whole."""
    paths = check_figure_outputs(out_dir, spec, force)
    make_output_dir(Path(out_dir))
    summary = summarize_runs(frame)
    png = io.BytesIO()
    plot_figure(summary, spec, png)
    write_atomic(paths["csv"], summary.to_csv(index=False))
    write_atomic(paths["plot"], png.getvalue())
    write_atomic(paths["report"], figure_report(summary, spec, seconds))
    return paths


def reproduce_figure(spec: FigureSpec, out_dir: str | os.PathLike, *, force: bool = False,
                     progress: bool = True) -> tuple[pd.DataFrame, dict[str, Path], float]:
    """Check the outputs, run the whole grid, write everything: (summary, paths, seconds)."""
    check_figure_outputs(out_dir, spec, force)
    start = time.perf_counter()
    frame = run_figure(spec, progress=progress)
    seconds = time.perf_counter() - start
    paths = write_figure(frame, spec, out_dir, seconds=seconds, force=force)
    return summarize_runs(frame), paths, seconds
