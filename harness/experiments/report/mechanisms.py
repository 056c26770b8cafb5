"""The mechanisms sweep's table and figure: each mechanism's cost against its noise.

One row per point x epsilon x protocol x mechanism: T_MPC, C_MPC and T_end_to_end
(mean ± sample std, and the repetitions' min-max of T_MPC), the noise's standard
deviation per entry and its ratio to the central Gaussian's, and the analyst's
errors psi and phi of the revealed sketches (mean ± std). Each mechanism's T_MPC is
also given as a multiple of the LTM's in the same protocol, n and epsilon, and the
central mechanism's extra time over the LTM's per cell and per coin. A cell the
sweep left out is a row that says why.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.experiments.report.render import _num, _pm, _tex_text, markdown_table, tex_table
from harness.experiments.report.security import _left_out_lines
from harness.experiments.report.tables import (
    _end_to_end_stats,
    _scale_of,
    _table_rows,
    cells_in_spec_order,
    complete_repetitions,
    coverage,
)
from harness.experiments.sweeps import Cell, Spec, load_spec
from harness.fileio import write_atomic
from harness.optional import lazy_import
from harness.privacy import DEFAULT_MECHANISM, mechanism_class, mechanism_names

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

__all__ = ["MECHANISM_COLUMNS", "headline", "summarize_mechanisms", "write_mechanisms"]

MECHANISM_COLUMNS = (
    "cell", "clients", "paper_clients", "epsilon", "protocol", "security", "mechanism",
    "servers", "sparsity", "rows", "dim", "scale", "repetitions", "t_mpc_mean_s",
    "t_mpc_std_s", "t_mpc_min_s", "t_mpc_max_s", "c_mpc_mean_mb", "servers_sent_mb",
    "t_end_to_end_mean_s", "t_end_to_end_std_s", "noise_std", "central_std", "std_ratio",
    "coins_per_cell", "grid_bits", "grid_step", "psi_mean", "psi_std", "phi_mean", "phi_std",
    "t_vs_ltm", "central_us_per_cell", "central_ns_per_coin", "left_out",
)


def summarize_mechanisms(raw: pd.DataFrame, table: str,
                         left_out: dict | None = None) -> pd.DataFrame:
    """One row per spec cell, measured or left out (with the reason), in the spec's order."""
    spec = load_spec(table)
    rows = _table_rows(raw, table)
    measured = pd.DataFrame(columns=["cell"])
    if not rows.empty:
        per = complete_repetitions(rows, servers_sent_mb=("global_data_sent_mb", "max"),
                                   psi=("psi", "first"), phi=("phi", "first"))
        stats = per.groupby("cell", sort=False).agg(
            repetitions=("t_mpc_s", "size"), t_mpc_mean_s=("t_mpc_s", "mean"),
            t_mpc_std_s=("t_mpc_s", "std"), t_mpc_min_s=("t_mpc_s", "min"),
            t_mpc_max_s=("t_mpc_s", "max"), c_mpc_mean_mb=("c_mpc_mb", "mean"),
            servers_sent_mb=("servers_sent_mb", "mean"), psi_mean=("psi", "mean"),
            psi_std=("psi", "std"), phi_mean=("phi", "mean"), phi_std=("phi", "std"))
        stats = stats.join(_end_to_end_stats(per)[["t_end_to_end_mean_s",
                                                   "t_end_to_end_std_s"]])
        params = rows.groupby("cell", sort=False)[
            ["security", "scale", "noise_std", "central_std", "std_ratio", "coins_per_cell",
             "grid_bits", "grid_step"]].first()
        measured = params.join(stats, how="inner").reset_index()

    def base(cell: Cell) -> dict:
        return {"cell": cell.key, "paper_clients": cell.paper_clients,
                "epsilon": cell.epsilon, "protocol": cell.protocol,
                "mechanism": cell.mechanism or DEFAULT_MECHANISM, "servers": cell.servers,
                "sparsity": cell.sparsity, "rows": cell.rows, "dim": cell.dim}

    frame = pd.DataFrame(cells_in_spec_order(spec, rows, measured, left_out, base),
                         columns=list(MECHANISM_COLUMNS))
    return _with_ratios(frame)


def _with_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """T_MPC against the LTM's same protocol, n and epsilon; the extra per cell and coin
    of a mechanism whose MPC draws coins (central's)."""
    ltm = frame[frame["mechanism"] == DEFAULT_MECHANISM].set_index(["protocol", "paper_clients",
                                                        "epsilon"])["t_mpc_mean_s"]
    key = list(zip(frame["protocol"], frame["paper_clients"], frame["epsilon"], strict=True))
    base = np.array([ltm.get(k, np.nan) for k in key], dtype=float)
    t = frame["t_mpc_mean_s"].astype(float).to_numpy()
    frame["t_vs_ltm"] = t / base
    cells = (frame["rows"] * frame["dim"]).astype(float).to_numpy()
    extra = np.where(frame["mechanism"].map(_draws_coins).astype(bool), t - base, np.nan)
    frame["central_us_per_cell"] = 1e6 * extra / cells
    frame["central_ns_per_coin"] = 1e9 * extra / (
        cells * frame["coins_per_cell"].astype(float).to_numpy())
    return frame


def _layout(summary: pd.DataFrame, tex: bool) -> tuple[list[str], list[list[str]]]:
    t = r"$T_{\mathrm{MPC}}$" if tex else "T_MPC"
    scaled = (_scale_of(summary) or 1.0) != 1.0
    cols = ["$n$" if tex else "n"] + (["paper $n$" if tex else "paper n"] if scaled else [])
    cols += [r"$\varepsilon$" if tex else "epsilon", "protocol", "mechanism",
             f"{t} (sec)", f"{t} min-max", f"{t} / ltm",
             r"$C_{\mathrm{MPC}}$ (MB)" if tex else "C_MPC (MB)",
             r"$T_{\mathrm{end\_to\_end}}$ (sec)" if tex else "T_end_to_end (sec)",
             "noise std", "std ratio", r"$\psi$" if tex else "psi",
             r"$\phi$" if tex else "phi", "runs"]
    body = []
    for r in summary.itertuples():
        line = [str(r.clients)] + ([str(r.paper_clients)] if scaled else [])
        line += [f"{r.epsilon:g}", r.protocol, r.mechanism]
        if r.left_out:
            line += ["left out (see the notes)" if tex else f"left out: {r.left_out}"]
            line += ["n/a"] * 9 + ["0"]
            body.append(line)
            continue
        line += [_pm(r.t_mpc_mean_s, r.t_mpc_std_s, tex),
                 f"{_num(r.t_mpc_min_s)}-{_num(r.t_mpc_max_s)}", _num(r.t_vs_ltm, 2),
                 _num(r.c_mpc_mean_mb), _pm(r.t_end_to_end_mean_s, r.t_end_to_end_std_s, tex),
                 _num(r.noise_std, 2), _num(r.std_ratio, 3), _sci_pm(r.psi_mean, r.psi_std, tex),
                 _pm(r.phi_mean, r.phi_std, tex), str(int(r.repetitions))]
        body.append(line)
    return cols, body


def _sci_pm(mean: float, std: float, tex: bool = False) -> str:
    """psi spans orders of magnitude across epsilon: three significant digits."""
    if pd.isna(mean):
        return "n/a"
    text = f"{mean:.3g}" + ("" if pd.isna(std) else
                            f" {chr(92) + 'pm' if tex else '±'} {std:.2g}")
    return f"${text}$" if tex else text


def _caption(spec: Spec, summary: pd.DataFrame) -> str:
    rank, lam = spec.utility or (0, 0.0)
    parts = [spec.title,
             "T_MPC: mean ± sample std over repetitions of the slowest party's time (its "
             "own aggregation of the clients' shares plus the MPC, the servers' noise "
             "included), with the repetitions' min-max; T_MPC / ltm: against the LTM's in "
             "the same protocol, n and epsilon. C_MPC: the clients' upload to all servers "
             "plus MP-SPDZ's global data sent. Noise std: per entry of the sketch; std "
             "ratio: to the central analytic Gaussian's at the same (epsilon, delta, "
             "sensitivity), 1 being the central model. "
             f"psi: the low-rank error of the rank-{rank} projection from the revealed "
             f"sketch; phi: the ridge regression's error ratio (lambda = {lam:g}); both "
             "on the same fixed-seed low-rank data for every mechanism (mean ± std over "
             "repetitions)."]
    scale = _scale_of(summary)
    if scale is not None and scale != 1.0:
        parts.append(f"Run at --scale {scale:g}: n is the paper's n times {scale:g}.")
    return " ".join(parts)


def _grid(row: Any) -> str:
    """The grid in words: its step where recorded (a public scale makes it no power of
    2), else 2^-g (rows before the scale)."""
    if pd.notna(getattr(row, "grid_step", math.nan)):
        return f"grid step {row.grid_step:.6g}"
    return f"grid 2^{-int(row.grid_bits)}"


def central_cost_lines(summary: pd.DataFrame) -> list[str]:
    """The central noise's extra time over the LTM's, per cell and per coin, per protocol."""
    part = summary[summary["mechanism"].map(_draws_coins).astype(bool)
                   & (summary["left_out"] == "")]
    lines = []
    for r in part.itertuples():
        lines.append(f"{r.mechanism}, {r.protocol}, n={r.clients}, epsilon {r.epsilon:g}: "
                     f"{int(r.coins_per_cell):,} coins per cell ({_grid(r)}), "
                     f"{_num(r.central_us_per_cell, 1)} us per cell, "
                     f"{_num(r.central_ns_per_coin, 2)} ns per coin over the LTM's T_MPC")
    return lines


def headline(summary: pd.DataFrame) -> str:
    """The largest n at each epsilon, the largest first, mechanism x protocol: what the
    sweep prints."""
    if summary.empty:
        return ""
    n = summary["paper_clients"].max()
    tables = []
    for eps in sorted(set(summary["epsilon"]), reverse=True):
        part = summary[(summary["paper_clients"] == n) & (summary["epsilon"] == eps)]
        body = []
        for mechanism in dict.fromkeys(part["mechanism"]):
            for r in part[part["mechanism"] == mechanism].itertuples():
                if r.left_out:
                    body.append([mechanism, r.protocol, "left out", "n/a", "n/a", "n/a"])
                    continue
                body.append([mechanism, r.protocol, _pm(r.t_mpc_mean_s, r.t_mpc_std_s),
                             _num(r.c_mpc_mean_mb, 1), _num(r.std_ratio, 3),
                             _sci_pm(r.psi_mean, r.psi_std)])
        tables.append(f"n={int(part['clients'].max())}, epsilon {eps:g}:\n" + markdown_table(
            ["mechanism", "protocol", "T_MPC (s)", "C_MPC (MB)", "std ratio", "psi"], body))
    return "\n".join(tables)


def _draws_coins(name: object) -> bool:
    return str(name) in mechanism_names() and mechanism_class(str(name)).draws_coins


# One marker per registered mechanism, in the registry's order (the LTM's first).
_MARKERS = dict(zip(mechanism_names(), "os^Dvp", strict=False))


def _plot(summary: pd.DataFrame, spec: Spec) -> bytes:
    from matplotlib.figure import Figure

    done = summary[summary["left_out"] == ""]
    points = sorted({(int(r.clients), float(r.epsilon)) for r in done.itertuples()}) \
        or [(0, 0.0)]
    metrics = (("t_mpc", "T_MPC (s)"), ("c_mpc", "C_MPC (MB)"),
               ("t_end_to_end", "T_end_to_end (s)"))
    fig = Figure(figsize=(12.0, 3.2 * len(points)), dpi=100)
    axes = fig.subplots(len(points), len(metrics), squeeze=False)
    colours = {p: f"C{i}" for i, p in enumerate(spec.protocols)}
    for row, (n, eps) in zip(axes, points, strict=True):
        part = done[(done["clients"] == n) & (done["epsilon"] == eps)]
        for ax, (metric, label) in zip(row, metrics, strict=True):
            for r in part.itertuples():
                y = getattr(r, f"{metric}_mean_s" if metric != "c_mpc" else "c_mpc_mean_mb")
                if metric == "t_mpc":
                    err = [[y - r.t_mpc_min_s], [r.t_mpc_max_s - y]]
                elif metric == "t_end_to_end":
                    err = [[0.0], [0.0]] if pd.isna(r.t_end_to_end_std_s) else \
                        [[r.t_end_to_end_std_s], [r.t_end_to_end_std_s]]
                else:
                    err = [[0.0], [0.0]]
                ax.errorbar([r.std_ratio], [y], yerr=err, marker=_MARKERS.get(r.mechanism, "x"),
                            color=colours.get(r.protocol, "k"), capsize=3, linestyle="none")
            ax.set_yscale("log")
            ax.set_xlabel("noise std / central Gaussian's")
            ax.set_ylabel(label)
            ax.set_title(f"n = {n}, epsilon = {eps:g}", fontsize=9)
            ax.grid(True, alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker="o", linestyle="none", label=p)
               for p, c in colours.items()]
    handles += [Line2D([], [], color="k", marker=m, linestyle="none", label=k)
                for k, m in _MARKERS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / len(points)))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def markdown(spec: Spec, summary: pd.DataFrame, notes: list[str]) -> str:
    header, body = _layout(summary, tex=False)
    cost = central_cost_lines(summary)
    return (f"{_caption(spec, summary)}\n\n{markdown_table(header, body)}"
            + ("\nThe central noise's cost:\n\n" + "".join(f"- {line}\n" for line in cost)
               if cost else "")
            + "".join(f"\n{line}\n" for line in notes))


def write_mechanisms(raw: pd.DataFrame, table: str, out_dir: Path, *, repeat: int | None,
                     left_out: dict | None, once: dict | None = None) -> list[Path]:
    """``<table>.csv``, ``.md``, ``.tex`` and ``.png`` of the mechanisms sweep."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(table)
    summary = summarize_mechanisms(raw, table, left_out)
    cov = coverage(raw, table, repeat)
    notes = _left_out_lines(left_out) + _left_out_lines(once, "Run once") + [
        line for line in cov.lines() if not line.startswith("Missing cells") or not left_out]
    header, body = _layout(summary, tex=True)
    tex = tex_table(header, [[_tex_text(c) if c.startswith("left out") else c for c in row]
                             for row in body], _caption(spec, summary), f"tab:ltm-{table}")
    tex += "".join(f"% {line}\n" for line in central_cost_lines(summary) + notes)
    return [
        write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        write_atomic(out_dir / f"{table}.md", markdown(spec, summary, notes)),
        write_atomic(out_dir / f"{table}.tex", tex),
        write_atomic(out_dir / f"{table}.png", _plot(summary, spec)),
    ]
