"""The grids of the paper's utility figures (and ``ridge-m``): panels and settings.

Kept apart from :mod:`.figures` (which runs and writes a grid) so that the plot
and the notes can name a :class:`FigureSpec` without importing the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.analyst import baselines
from harness.errors import InputError, check_number

__all__ = ["DEFAULT_DELTA", "DEFAULT_M", "DEFAULT_ROW_NORM", "FIGURES", "RIDGE_M_SIZES",
           "FigureSpec", "Panel", "figure_spec", "n_values"]

FIGURES = ("lowrank", "ridge", "ridge-lambda", "ridge-m")
# ridge-m: the sketch sizes of its panels (the plateau of the LTM falls like 1/m).
RIDGE_M_SIZES = (50, 500, 5000)
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
    m: int | None = None  # this panel's sketch rows, when they differ between panels
    sketch: bool = True  # False: the Gaussian LTM without a sketch (A + N, m = n)


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
    laplace: bool = True  # the Laplace LTM's dense sketch: m x n signs, slow for large m

    def __post_init__(self) -> None:
        baselines.check_calibration(self.calibration)
        if self.calibration == "corollary" and not all(p.sketch for p in self.panels):
            raise InputError(f"figure {self.name} needs --calibration dp or experiments: its "
                             "no-sketch panel has m = n, where the corollary's R_D sends zeros")
        if int(self.runs) != self.runs or self.runs < 2:
            raise InputError(f"--runs must be an integer >= 2 (a standard deviation needs two "
                             f"runs), got {self.runs}")
        if self.s != 1:
            raise InputError("the figures use the sparse sketch with s = 1")

    @property
    def columns(self) -> int:
        return self.d + 1 if self.problem == "ridge" else self.d

    @property
    def per_panel_m(self) -> bool:
        return any(p.m is not None or not p.sketch for p in self.panels)

    def panel_m(self, panel: Panel, n: int) -> int:
        """The sketch rows of ``panel`` at n: its own m, the figure's, or n without a sketch."""
        if not panel.sketch:
            return n
        return self.m if panel.m is None else panel.m

    @property
    def metric(self) -> str:
        return "psi" if self.problem == "lowrank" else "phi"

    @property
    def grid(self) -> tuple[int, int]:
        return (max(p.row for p in self.panels) + 1, max(p.col for p in self.panels) + 1)

    def privacy(self, epsilon: float) -> baselines.Privacy:
        return baselines.Privacy(epsilon, self.delta, self.eta, row_norm=self.row_norm)

    def describe(self) -> dict:
        m: Any = ([self.panel_m(p, 0) or "n" for p in self.panels] if self.per_panel_m
                  else self.m)
        return {"figure": self.name, "problem": self.problem, "metric": self.metric,
                "calibration": self.calibration, "d": self.d, "m": m, "s": self.s,
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
    elif name == "ridge-m":
        # eps = 0.1, where the paper's LTM curve reaches SSP's; the plateau's 1/m
        # shows against the no-sketch LTM, whose noise is the bucket noise at m = n.
        sized = [Panel(f"m={size}", i // 2, i % 2, 0.1, lam=10.0, m=size)
                 for i, size in enumerate(RIDGE_M_SIZES)]
        panels = (*sized, Panel("no sketch", 1, 1, 0.1, lam=10.0, sketch=False))
        common["n"] = n_values(DEFAULT_M, quick)
        return FigureSpec(name, "ridge", 10, panels, laplace=False, **common)
    else:
        panels = tuple(Panel(f"eps={e:g}, lambda={lam:g}", r, c, e, lam=lam)
                       for r, e in enumerate(eps) for c, lam in enumerate((1.0, 10.0, 100.0)))
    return FigureSpec(name, "ridge", 10, panels, **common)
