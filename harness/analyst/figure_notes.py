"""What a figure's numbers rest on, checked, and said beside them.

Two things the paper's captions leave out, measured here rather than assumed:

- the row bound. Every calibration assumes it: rows of l2 norm <= R (the local
  model, MOD-SULQ, SSP and the Gaussian LTM under ``dp`` and ``experiments``)
  or entries |a| <= eta (the corollary's Gaussian LTM and the Laplace LTM).
  The synthetic data are not clipped, so :func:`data_bounds` draws the
  figure's data explicitly at each n (same distribution and seed family as the
  grid; in chunks of 65,536 rows, some 50 MB at a time) and reports its
  largest row norm and entry; the report says whether they exceed R and eta.
  Where they do, the noise is calibrated for a sensitivity the data do not
  have, and no curve of that figure is (epsilon, delta)-DP.
- SSP's noisy Gram. At small n the Gaussian noise on [A | b]^T [A | b]
  outweighs A^T A, and the matrix SSP inverts, noisy A^T A + lambda I, is
  indefinite: the "ridge solution" then minimises nothing and its phi swings
  over orders of magnitude between runs. The paper's caption says the standard
  deviations are too small to see; :func:`indefinite_notes` counts the runs.
"""

from __future__ import annotations

import math

import numpy as np

from harness.analyst import baselines
from harness.analyst.figure_grid import FigureSpec
from harness.analyst.mechanisms import one_blas_thread

__all__ = ["bound_notes", "data_bounds", "figure_report", "indefinite_notes"]

# Rows drawn at a time: 65536 x 50 doubles is 26 MB.
_CHUNK = 1 << 16
# Keeps the explicit draws apart from the grid's own seeds ([seed, n, run]).
_STREAM = 2**20


def _chunks(n: int, d: int, children: list[np.random.SeedSequence]):
    for index, child in enumerate(children):
        rows = min(_CHUNK, n - index * _CHUNK)
        yield np.random.default_rng(child).standard_normal((rows, d))


def _bounds(n: int, d: int, transform, children: list[np.random.SeedSequence]
            ) -> tuple[float, float]:
    """Largest row norm and |entry| of transform(X) over one explicit Gaussian X (n x d)."""
    norm = entry = 0.0
    for X in _chunks(n, d, children):
        A = transform(X)
        norm = max(norm, float(np.sqrt(np.einsum("ij,ij->i", A, A)).max()))
        entry = max(entry, float(np.abs(A).max()))
    return norm, entry


def _lowrank_transform(n: int, d: int, k: int, children: list[np.random.SeedSequence],
                       rng: np.random.Generator):
    """A = X R^-1 Sigma V^T (X = Q R): the paper's low-rank data, as simulate draws them."""
    gram = sum(X.T @ X for X in _chunks(n, d, children))
    R = np.linalg.cholesky(gram).T
    sigma = np.full(d, 1.0 / n)
    sigma[:k] = math.sqrt(n / k)
    V = np.linalg.qr(rng.standard_normal((d, d)))[0]
    M = np.linalg.solve(R, sigma[:, None] * V.T)
    return lambda X: X @ M


def data_bounds(spec: FigureSpec, *, progress: bool = False) -> list[dict]:
    """One explicit draw of the figure's data at each n: its largest row norm and entry.

    Low rank: one row per rank k of the panels; ridge: the rows [a | a x] with
    x ~ N(0, n I), the paper's mu^2 = n. BLAS on one thread: each chunk's Gram and
    product are small, and OpenBLAS's threads on a busy machine made them some
    hundred times slower (the quick figure waited 17 s after its grid on a loaded
    two-core machine).
    """
    from tqdm import tqdm

    ranks: list[int | None] = [*sorted({p.k for p in spec.panels if p.k is not None})]
    ranks = ranks or [None]
    out = []
    with one_blas_thread(), tqdm(total=len(spec.n) * len(ranks), disable=not progress,
                                 desc=f"figure {spec.name} data bounds", unit="draw") as bar:
        for n in spec.n:
            for k in ranks:
                bar.set_postfix(n=n, refresh=False)
                out.append({"n": n, "k": k, **_bounds_at(spec, n, k)})
                bar.update()
    return out


def _bounds_at(spec: FigureSpec, n: int, k: int | None) -> dict:
    seed = np.random.SeedSequence([spec.seed, n, _STREAM, k or 0])
    data_seed, side = seed.spawn(2)
    rng = np.random.default_rng(side)
    children = data_seed.spawn(math.ceil(n / _CHUNK))
    if spec.problem == "lowrank" and k is not None:
        # two passes over the same chunks: R from the whole X, then the rows
        transform = _lowrank_transform(n, spec.d, k, children, rng)
    else:
        x = rng.normal(0.0, math.sqrt(n), size=spec.d)
        transform = lambda X, x=x: np.column_stack([X, X @ x])  # noqa: E731
    norm, entry = _bounds(n, spec.d, transform, children)
    return {"max_row_norm": norm, "max_entry": entry}


def _assumed(spec: FigureSpec) -> tuple[float, float]:
    """(R, eta): the row bound and entry bound the figure's calibrations use."""
    return spec.privacy(1.0).bound(spec.columns), spec.eta


def bound_notes(spec: FigureSpec, bounds: list[dict]) -> list[str]:
    """Sentences stating R and eta and whether the drawn data exceed them."""
    R, eta = _assumed(spec)
    small, large = min(spec.n), max(spec.n)

    def largest(key: str, n: int) -> float:
        return max(b[key] for b in bounds if b["n"] == n)

    over = [b["n"] for b in bounds if b["max_row_norm"] > R or b["max_entry"] > eta]
    lines = [f"Row bound: the local model, MOD-SULQ, SSP and the Gaussian LTM under dp and "
             f"experiments assume rows of l2 norm <= R = {R:g}; the corollary's Gaussian LTM "
             f"and the Laplace LTM assume entries |a| <= eta = {eta:g}.",
             f"The figure's data (one explicit draw per n, not clipped) have rows of norm up "
             f"to {largest('max_row_norm', small):.3g} at n = {small} and "
             f"{largest('max_row_norm', large):.3g} at n = {large}, entries up to "
             f"{largest('max_entry', small):.3g} and {largest('max_entry', large):.3g}."]
    if over:
        lines.append(f"They exceed the bound at {len(set(over))} of {len(spec.n)} values of n "
                     f"(from n = {min(over)}): there the noise is calibrated for a sensitivity "
                     "the data do not have, and the curves are not (epsilon, delta)-DP.")
    else:
        lines.append("They stay within it at every n.")
    return lines


def indefinite_notes(frame, spec: FigureSpec) -> dict[str, str]:
    """Per panel: in how many runs SSP's noisy A^T A + lambda I was indefinite, and where."""
    if "indefinite" not in frame or spec.problem != "ridge":
        return {}
    central = frame[frame["mechanism"] == "central"]
    notes = {}
    for panel in spec.panels:
        part = central[central["panel"] == panel.name]
        bad = part[part["indefinite"].astype(bool)]
        if len(bad):
            per_n = bad.groupby("n").size()
            there = part[part["n"].isin(per_n.index)].groupby("n")["error"]
            spread = float((there.std() / there.mean()).max())
            notes[panel.name] = (f"SSP's noisy A^T A + lambda I indefinite in {len(bad)} of "
                                 f"{len(part)} runs, at n <= {int(per_n.index.max())} "
                                 f"({int(per_n.iloc[0])}/{spec.runs} at n = "
                                 f"{int(per_n.index.min())}); there phi's std is up to "
                                 f"{spread:.2g} x its mean")
    return notes


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def figure_report(summary, spec: FigureSpec, seconds: float, *, bounds: list[dict],
                  indefinite: dict[str, str]) -> str:
    """A short markdown report: the settings, the notes, and per panel each curve's
    first and last n."""
    lines = [f"# Figure `{spec.name}` ({spec.metric}), calibration `{spec.calibration}`", "",
             f"Calibration: {baselines.calibration_label(spec.calibration)}.", ""]
    m_text = (f"m per panel: {', '.join(p.name for p in spec.panels)} (a panel starts at "
              "n >= m)" if spec.per_panel_m else f"m = {spec.m}")
    laplace = ("Laplace LTM omitted (its dense sketch is m x n signs)" if not spec.laplace
               else "the Laplace LTM uses the dense sketch, s = m")
    lines += [f"- settings the paper states: d = {spec.d}, n = 1000 * 1.5^i "
              f"({len(spec.n)} values, {spec.n[0]} .. {spec.n[-1]}), {spec.runs} runs per "
              f"point, p in {{{', '.join(f'{p:g}' for p in spec.p_values)}}}",
              f"- settings it does not state (chosen here): {m_text}, s = {spec.s} "
              f"(Gaussian LTM; {laplace}), delta = {spec.delta:g}, "
              f"R = {_assumed(spec)[0]:g}, eta = {spec.eta:g}, seed {spec.seed}",
              f"- run time: {seconds:.0f} s" + (" (quick grid, not the paper's)"
                                                if spec.quick else ""), "",
              "## Notes", ""]
    lines += [f"- {line}" for line in bound_notes(spec, bounds)]
    if spec.problem == "ridge":
        lines += [f"- {panel}: {text}." for panel, text in indefinite.items()] or [
            "- SSP's noisy A^T A + lambda I was positive definite in every run."]
        if indefinite:
            lines.append("- Where it is indefinite, SSP's solution minimises nothing and its "
                         "phi varies widely between runs, not invisibly as the paper's "
                         "caption says.")
    lines += ["", "| n | k | largest row norm | largest entry |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {b['n']} | {'' if b['k'] is None else b['k']} | {_fmt(b['max_row_norm'])} | "
              f"{_fmt(b['max_entry'])} |" for b in bounds]
    small, large = min(spec.n), max(spec.n)
    lines += ["", f"| panel | mechanism | p | {spec.metric} at its first n | "
              f"{spec.metric} at n={large} | last/first |",
              "| --- | --- | --- | ---: | ---: | ---: |"]
    for panel in spec.panels:
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            first = curve[curve["n"] == curve["n"].min()].iloc[0]
            last = curve[curve["n"] == curve["n"].max()].iloc[0]
            ratio = last["error_mean"] / first["error_mean"] if first["error_mean"] else math.nan
            p_text = "" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:g}"
            start = "" if first["n"] == small else f" (n={first['n']})"
            lines.append(f"| {panel.name} | {mechanism} | {p_text} | "
                         f"{_fmt(first['error_mean'])} +- {_fmt(first['error_std'])}{start} | "
                         f"{_fmt(last['error_mean'])} +- {_fmt(last['error_std'])} | "
                         f"{_fmt(ratio)} |")
    return "\n".join(lines) + "\n"
