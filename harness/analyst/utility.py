"""Utility sweeps: the error of each mechanism as the number of clients n grows.

Reproduces the shape of the paper's figures (Section "Interpolation between
Local and Central DP"): psi (low rank) or phi (ridge) against log-spaced n for
the local model, the central model, the LTM with Gaussian and with Laplace noise,
and the Gaussian LTM with variance proportional to n^-p. Every (n, repetition)
draws fresh data, sketches and noise from seeds derived from ``seed``, so a sweep
is reproducible; all methods of one repetition see the same data, and all
Gaussian LTM variants the same sparse sketch.
"""

from __future__ import annotations

import math
import os
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.analyst import analysis, baselines, datasets
from harness.clients import Sketch
from harness.errors import InputError
from harness.fileio import check_output_dir
from harness.privacy import NoiseSpec

__all__ = [
    "DEFAULT_P_VALUES",
    "PROBLEMS",
    "SweepConfig",
    "check_outputs",
    "method_names",
    "n_grid",
    "output_paths",
    "plot_sweep",
    "summarize",
    "sweep",
    "write_outputs",
]

PROBLEMS = ("lowrank", "ridge")
# p = 1 is the "ltm-gaussian" curve itself.
DEFAULT_P_VALUES = tuple(p for p in baselines.P_VALUES if p != 1.0)
_COLOURS = {"local": "tab:gray", "central": "tab:blue", "ltm-gaussian": "tab:orange",
            "ltm-laplace": "limegreen"}


@dataclass(frozen=True)
class SweepConfig:
    problem: str = "lowrank"
    n_min: int = 5_000
    n_max: int = 200_000
    points: int = 6
    d: int = 4
    k: int = 2
    lam: float = 10.0
    mu2: str = "n"
    m: int = 20
    s: int = 1
    repeat: int = 3
    epsilon: float = 3.0
    delta: float = 1e-6
    eta: float = 1.0
    seed: int = 0
    p_values: tuple[float, ...] = field(default=DEFAULT_P_VALUES)
    calibration: str = "corollary"

    def __post_init__(self) -> None:
        baselines.check_calibration(self.calibration)
        if self.problem not in PROBLEMS:
            raise InputError(f"unknown problem {self.problem!r}; choose {' or '.join(PROBLEMS)}")
        for name, value in (("--points", self.points), ("--repeat", self.repeat),
                            ("--m", self.m), ("--s", self.s), ("--d", self.d)):
            if int(value) != value or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value}")
        if not self.m <= self.n_min <= self.n_max:
            raise InputError(f"need m <= n-min <= n-max, got m={self.m}, n-min={self.n_min}, "
                             f"n-max={self.n_max}; adjust --n-min / --n-max")
        if self.s > self.m:
            raise InputError(f"--s {self.s} exceeds --m {self.m}")
        if self.problem == "lowrank" and not 1 <= self.k < self.d:
            raise InputError(f"--k must satisfy 1 <= k < d={self.d}, got {self.k}")
        if self.problem == "ridge" and not self.lam > 0:
            raise InputError(f"--lambda must be positive (phi divides by the optimal cost), "
                             f"got {self.lam}")
        if any(not 0 <= p <= 1 for p in self.p_values):
            raise InputError(f"--p-values must lie in [0, 1], got {list(self.p_values)}")
        datasets.parse_mu2(self.mu2, self.n_min)
        baselines.Privacy(self.epsilon, self.delta, self.eta)  # raises on bad values

    @property
    def privacy(self) -> baselines.Privacy:
        return baselines.Privacy(self.epsilon, self.delta, self.eta)

    @property
    def columns(self) -> int:
        """Columns the clients sketch: d, or d features plus the target for ridge."""
        return self.d + 1 if self.problem == "ridge" else self.d

    @property
    def metric(self) -> str:
        return "psi" if self.problem == "lowrank" else "phi"


def method_names(p_values: Sequence[float] = DEFAULT_P_VALUES) -> list[str]:
    return (["local", "central", "ltm-gaussian", "ltm-laplace"]
            + [f"p={p:g}" for p in p_values if p != 1.0])


def n_grid(n_min: int, n_max: int, points: int, multiple_of: int = 1) -> list[int]:
    """``points`` log-spaced client counts in [n_min, n_max], rounded to multiples of
    ``multiple_of`` (the dense sketch needs m | n), duplicates dropped."""
    raw = np.geomspace(n_min, n_max, points) if points > 1 else np.array([n_min])
    step = int(multiple_of)
    rounded = {max(step, int(round(v / step)) * step) for v in raw}
    return sorted(rounded)


# --- one repetition ------------------------------------------------------------


@dataclass
class _Trial:
    """Data and sketches shared by all methods of one (n, repetition)."""

    config: SweepConfig
    n: int
    data: np.ndarray
    sparse: Sketch
    dense: Sketch
    rng: np.random.Generator
    target: np.ndarray | None = None
    optimum: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        if c.problem == "lowrank":
            self.optimum = analysis.lowrank_projection(self.data, c.k)
        else:
            self.optimum = analysis.ridge_solve(self.data, self.b, c.lam)

    @property
    def max_row_norm(self) -> float:
        """The largest l2 norm of a row the clients hold ([a | b] for ridge)."""
        Z = self.data if self.target is None else np.column_stack([self.data, self.target])
        return float(np.sqrt(np.einsum("ij,ij->i", Z, Z)).max())

    @property
    def b(self) -> np.ndarray:
        """The regression target: a ridge trial always has one."""
        if self.target is None:
            raise ValueError("a low-rank trial has no regression target")
        return self.target

    def noise(self, kind: str) -> NoiseSpec:
        s = self.config.m if kind == "laplace" else self.config.s
        return baselines.ltm_noise(kind, self.n, self.config.m, self.config.columns, s,
                                   self.config.privacy)

    def error(self, estimate: np.ndarray) -> float:
        if self.config.problem == "lowrank":
            return analysis.psi(self.data, estimate, self.optimum)
        return analysis.phi(self.data, self.b, estimate, self.optimum, self.config.lam)

    def estimate(self, method: str) -> tuple[np.ndarray, dict]:
        """Run one mechanism; also report its client noise variance."""
        c, privacy, rng = self.config, self.config.privacy, self.rng
        lowrank = c.problem == "lowrank"
        if method == "local":
            info = {"sigma2": baselines.local_sigma2(c.columns, privacy)}
            if lowrank:
                return baselines.local_lowrank(self.data, c.k, privacy, rng), info
            return baselines.local_ridge(self.data, self.b, c.lam, privacy, rng), info
        if method == "central":
            if lowrank:
                return baselines.mod_sulq_projection(self.data, c.k, privacy, rng), {
                    "sigma2": baselines.mod_sulq_beta(self.n, c.d, c.epsilon, c.delta) ** 2}
            return baselines.ssp_ridge(self.data, self.b, c.lam, privacy, rng), {
                "sigma2": baselines.ssp_sigma2(c.columns, privacy)}
        kind = "laplace" if method == "ltm-laplace" else "gaussian"
        p = 1.0 if kind == "laplace" else _exponent(method)
        spec = self.noise(kind)
        sketch = self.dense if kind == "laplace" else self.sparse
        calibrated = {"calibration": c.calibration, "privacy": privacy}
        experiments = c.calibration == "experiments"
        if kind == "gaussian":
            sigma2 = baselines.interpolated_sigma2(spec, p, privacy, c.calibration)
        else:  # per client entry, or per sketch entry for the experiments' recipe
            sigma2 = 2 * c.m / c.epsilon**2 if experiments else spec.variance
        info = {"sigma2": sigma2,
                "zero_output": spec.zero_output and c.calibration == "corollary"}
        if lowrank:
            return baselines.ltm_lowrank(self.data, c.k, sketch, spec, rng, p, **calibrated), info
        return baselines.ltm_ridge(self.data, self.b, c.lam, sketch, spec, rng, p,
                                   **calibrated), info


def _trial(config: SweepConfig, n: int, rep: int) -> _Trial:
    seeds = np.random.SeedSequence([config.seed, n, rep]).spawn(4)
    data_rng = np.random.default_rng(seeds[0])
    sketch_seed, dense_seed = (int(s.generate_state(1)[0]) for s in seeds[1:3])
    sparse = Sketch.generate(n, config.m, config.s, sketch_seed)
    dense = Sketch.generate(n, config.m, config.m, dense_seed, dense=True)
    rng = np.random.default_rng(seeds[3])
    if config.problem == "lowrank":
        data = datasets.lowrank_data(n, config.d, config.k, data_rng)
        return _Trial(config, n, data, sparse, dense, rng)
    mu2 = datasets.parse_mu2(config.mu2, n)
    features, target, _ = datasets.regression_data(n, config.d, mu2, data_rng)
    return _Trial(config, n, features, sparse, dense, rng, target)


def _exponent(method: str) -> float:
    """The interpolation exponent p of a Gaussian LTM method, NaN for the others."""
    if method == "ltm-gaussian":
        return 1.0
    return float(method[2:]) if method.startswith("p=") else math.nan


def _row(config: SweepConfig, trial: _Trial, rep: int, method: str) -> dict:
    start = time.perf_counter()
    estimate, info = trial.estimate(method)
    error = trial.error(estimate)
    return {"problem": config.problem, "method": method, "p": _exponent(method),
            "n": trial.n, "repetition": rep,
            "metric": config.metric, "error": error, "sigma2": info["sigma2"],
            "zero_output": bool(info.get("zero_output", False)),
            "seconds": time.perf_counter() - start, "d": config.d,
            "k": config.k if config.problem == "lowrank" else math.nan,
            "lambda": config.lam if config.problem == "ridge" else math.nan,
            "mu2": config.mu2 if config.problem == "ridge" else "", "m": config.m,
            "s": config.s, "epsilon": config.epsilon, "delta": config.delta,
            "eta": config.eta, "seed": config.seed, "calibration": config.calibration,
            # the bound the local, central and dp calibrations assume, and the data's
            "row_bound": config.privacy.bound(config.columns),
            "max_row_norm": trial.max_row_norm}


def sweep(config: SweepConfig, *, progress: bool = True,
          on_row: Callable[[dict], None] | None = None):
    """Run every method ``repeat`` times at each n; one flat row per run, as a DataFrame."""
    import pandas as pd
    from tqdm import tqdm

    grid = n_grid(config.n_min, config.n_max, config.points, config.m)
    methods = method_names(config.p_values)
    rows: list[dict] = []
    total = len(grid) * config.repeat * len(methods)
    with tqdm(total=total, disable=not progress, desc=f"utility {config.problem}",
              unit="run") as bar:
        for n in grid:
            for rep in range(config.repeat):
                trial = _trial(config, n, rep)
                for method in methods:
                    bar.set_postfix(n=n, method=method, refresh=False)
                    rows.append(_row(config, trial, rep, method))
                    if on_row:
                        on_row(rows[-1])
                    bar.update()
    return pd.DataFrame(rows)


def summarize(frame):
    """Mean, standard deviation (over repetitions) and count of the error per (method, n)."""
    summary = (frame.groupby(["method", "n"], sort=False)["error"]
               .agg(mean="mean", std="std", runs="count").reset_index())
    summary["std"] = summary["std"].fillna(0.0)
    return summary


# --- plots and files --------------------------------------------------------------


def _style(method: str, p_values: list[float]) -> dict:
    if method in _COLOURS:
        return {"color": _COLOURS[method], "linewidth": 2.0}
    from matplotlib import colormaps

    # Spread the p-curves over a colour map no fixed curve uses, p = 0 (local-like) darkest.
    p = float(method[2:])
    span = (max(p_values) - min(p_values)) or 1.0
    return {"color": colormaps["RdPu"](0.95 - 0.6 * (p - min(p_values)) / span),
            "linewidth": 1.0, "linestyle": "--"}


def plot_sweep(frame, path: str | os.PathLike, title: str = "") -> None:
    """Error against n (log x axis), one line per method, error bars = std over runs.

    Uses a bare Figure on the Agg canvas, never pyplot, so no global figure state
    is left behind and no display is needed.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    summary = summarize(frame)
    metric = str(frame["metric"].iloc[0]) if len(frame) else "error"
    p_values = [float(m[2:]) for m in summary["method"].unique() if m.startswith("p=")]
    recipe = len(frame) and "calibration" in frame and frame["calibration"].iloc[0] == \
        "experiments"
    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for method, part in summary.groupby("method", sort=False):
        mean, std = part["mean"].to_numpy(), part["std"].to_numpy()
        # Keep log-scale error bars above zero: clip the lower bar at the mean.
        lower = np.minimum(std, np.where(mean > 0, mean * 0.999, std))
        # The experiments' LTM is never shown without what it is not.
        label = (textwrap.fill(f"{method}, {baselines.EXPERIMENTS_LABEL}", 40)
                 if recipe and method in ("ltm-gaussian", "ltm-laplace") else method)
        ax.errorbar(part["n"], mean, yerr=[lower, std], label=label, capsize=2,
                    ecolor="black", elinewidth=0.6, **_style(method, p_values))
    ax.set_xscale("log")
    if len(summary) and (summary["mean"] > 0).all():
        ax.set_yscale("log")
    ax.set_xlabel("number of clients n")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=1 if recipe else 2)
    fig.savefig(path, dpi=120)


def output_paths(out_dir: str | os.PathLike, problem: str) -> dict[str, Path]:
    out = Path(out_dir)
    return {"runs": out / f"utility-{problem}.csv",
            "summary": out / f"utility-{problem}-summary.csv",
            "plot": out / f"utility-{problem}.png"}


def check_outputs(out_dir: str | os.PathLike, problem: str, force: bool) -> dict[str, Path]:
    """The output paths, refusing (before any work) to overwrite files unless ``force``."""
    check_output_dir(out_dir, whole=False)
    paths = output_paths(out_dir, problem)
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise InputError(f"{', '.join(existing)} already exist(s); choose another --out or "
                         "pass --force to overwrite")
    return paths


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(path.name + ".part" + path.suffix)
    write(tmp)
    os.replace(tmp, path)


def write_outputs(frame, config: SweepConfig, out_dir: str | os.PathLike, *,
                  force: bool = False) -> dict[str, Path]:
    """Write the per-run CSV, the summary CSV and the plot into ``out_dir``."""
    paths = check_outputs(out_dir, config.problem, force)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    _atomic(paths["runs"], lambda p: frame.to_csv(p, index=False))
    _atomic(paths["summary"], lambda p: summarize(frame).to_csv(p, index=False))
    _atomic(paths["plot"], lambda p: plot_sweep(frame, p, _title(config)))
    return paths


def _title(config: SweepConfig) -> str:
    what = (f"low-rank approximation, k={config.k}" if config.problem == "lowrank"
            else f"ridge regression, lambda={config.lam:g}, mu^2={config.mu2}")
    return (f"{what}\nd={config.d}, m={config.m}, s={config.s}, "
            f"eps={config.epsilon:g}, delta={config.delta:g}\n"
            + textwrap.fill(f"calibration={baselines.calibration_label(config.calibration)}",
                            70))
