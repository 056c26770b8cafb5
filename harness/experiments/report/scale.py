"""The scale sweep's table and plot: wall, stages, T_MPC and peak memory against n.

Per cell (one n), from the raw rows of whole runs (a spec's ``whole_runs``):

- wall: the repetition's wall time in the sweep's process, from building the
  workload to the verified result (``run_wall_s``), mean ± sample std;
- T_end_to_end and T_MPC as in the paper's tables (:mod:`harness.experiments.report`);
- the stages, each the mean over repetitions of what the run timed: ``prepare_s``,
  ``client_upload_s``, ``expand_s`` (the slowest server), ``mpc_wall_s`` and every
  ``stream_*`` key the run reports, whichever the rows hold;
- peak memory: the largest PSS of the sweep's process and all its descendants
  (the parties) over the repetitions (``peak_pss_bytes``), and its growth per
  client from the previous n (the interpreter's own memory cancels);
- beside them the paper's Table 3 extrapolated: a least-squares line through its
  T_MPC against n (n = 1e5 to 1e6), evaluated at the run's n. It is not a
  measurement: beyond the paper's n it assumes T_MPC stays linear in n.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.experiments.report.render import _num, _pm, markdown_table, tex_table
from harness.experiments.report.tables import _scale_of, _table_rows, coverage
from harness.experiments.results import migrate_rows
from harness.experiments.sweeps import Spec, load_spec, paper_values
from harness.fileio import write_atomic
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

__all__ = ["EXTRAPOLATION", "paper_line", "stage_columns", "summarize_scale", "write_scale"]

EXTRAPOLATION = "paper's Table 3, linear extrapolation"
# The stages every run may time, in T_end_to_end's order, with their labels.
_STAGES = {"prepare_s": "prepare", "client_upload_s": "upload", "expand_s": "expand",
           "mpc_wall_s": "MPC wall"}
_STREAM = "stream_"
_TARGET_GIB = 1.0  # the memory target at every n (docs: Run at population scale), drawn


def stage_columns(rows: pd.DataFrame) -> list[str]:
    """The raw rows' stage keys: the known ones, then every ``stream_*`` key, sorted."""
    return [k for k in _STAGES if k in rows.columns] + sorted(
        c for c in rows.columns if str(c).startswith(_STREAM))


def _mean_name(key: str) -> str:
    return f"{key[:-2]}_mean_s" if key.endswith("_s") else f"{key}_mean"


def paper_line(spec: Spec) -> tuple[float, float]:
    """(slope s per client, intercept s) of the line fitted to the paper's table."""
    paper = paper_values()
    paper = paper[paper["table"] == spec.paper]
    slope, intercept = np.polyfit(paper["clients"].astype(float),
                                  paper["t_mpc_mean_s"].astype(float), 1)
    return float(slope), float(intercept)


def summarize_scale(raw: pd.DataFrame, table: str) -> pd.DataFrame:
    """One row per n, in spec order (the columns are described in the module's docstring)."""
    spec = load_spec(table)
    rows = _table_rows(raw, table)
    if rows.empty:
        return pd.DataFrame()
    rows = migrate_rows(rows)
    stages = stage_columns(rows)
    for key in stages:  # a stage no repetition timed is NaN, never a text column
        rows[key] = pd.to_numeric(rows[key], errors="coerce")
    firsts = {k: (k, "first") for k in ("run_wall_s", "peak_pss_bytes", *stages)
              if k != "expand_s"}
    per = rows.groupby(["cell", "repetition"], sort=False).agg(
        t_mpc_s=("time_s", "max"), t_end_to_end_s=("t_end_to_end_s", "max"),
        parties=("party", "nunique"), servers=("servers", "first"),
        **({"expand_s": ("expand_s", "max")} if "expand_s" in stages else {}),
        **firsts).reset_index()
    per = per[per["parties"] >= per["servers"]]
    for col in ("run_wall_s", "peak_pss_bytes", "t_end_to_end_s"):
        per[col] = pd.to_numeric(per[col], errors="coerce")
    stats = per.groupby("cell", sort=False).agg(
        repetitions=("t_mpc_s", "size"),
        run_wall_mean_s=("run_wall_s", "mean"), run_wall_std_s=("run_wall_s", "std"),
        t_end_to_end_mean_s=("t_end_to_end_s", "mean"),
        t_end_to_end_std_s=("t_end_to_end_s", "std"),
        **{_mean_name(k): (k, "mean") for k in stages},
        t_mpc_mean_s=("t_mpc_s", "mean"), t_mpc_std_s=("t_mpc_s", "std"),
        peak_pss_bytes=("peak_pss_bytes", "max"))
    params = rows.groupby("cell", sort=False)[
        ["table", "servers", "clients", "paper_clients", "sparsity", "rows", "dim",
         "scale"]].first()
    out = params.join(stats, how="inner").reset_index()
    for col in ("servers", "clients", "paper_clients", "sparsity", "rows", "dim",
                "repetitions"):
        out[col] = out[col].astype(int)
    out["peak_pss_gib"] = out["peak_pss_bytes"] / 2**30
    slope, intercept = paper_line(spec)
    out["paper_t_mpc_extrapolated_s"] = intercept + slope * out["clients"].astype(float)
    out["t_mpc_to_extrapolation"] = out["t_mpc_mean_s"] / out["paper_t_mpc_extrapolated_s"]
    order = {c.key: i for i, c in enumerate(spec.cells)}
    out["_order"] = out["cell"].map(lambda k: order.get(k, len(order)))
    out = out.sort_values(["_order", "cell"], kind="stable").drop(columns="_order") \
        .reset_index(drop=True)
    # The memory a client costs, from the previous n: the interpreter's own, present at
    # every n, cancels (peak / n would charge it to the clients).
    out["peak_bytes_per_added_client"] = (out["peak_pss_bytes"].diff()
                                          / out["clients"].astype(float).diff())
    return out


def _stage_means(summary: pd.DataFrame) -> list[tuple[str, str]]:
    """(summary column, header) of each stage some repetition timed, in table order.

    The upload, for one, is not measured without a network: its column stays out.
    """
    known = [(_mean_name(k), f"{label} (s)") for k, label in _STAGES.items()]
    streams = []
    for col in sorted(c for c in summary.columns if str(c).startswith(_STREAM)):
        seconds = col.endswith("_mean_s")
        name = col.removeprefix(_STREAM).removesuffix("_mean_s" if seconds else "_mean")
        streams.append((col, f"stream {name.replace('_', ' ')}" + (" (s)" if seconds else "")))
    return [(col, head) for col, head in known + streams
            if col in summary.columns and summary[col].notna().any()]


def _layout(summary: pd.DataFrame, tex: bool) -> tuple[list[str], list[list[str]]]:
    scaled = (_scale_of(summary) or 1.0) != 1.0
    stages = _stage_means(summary)
    header = ["n"] + (["unscaled n"] if scaled else []) + [
        "wall (s)", "T_end_to_end (s)"] + [head for _, head in stages] + [
        "T_MPC (s)", "peak PSS (GiB)", "peak growth per client (bytes)",
        f"{EXTRAPOLATION}: T_MPC (s)", "T_MPC / extrapolation", "runs"]
    body = []
    for r in summary.to_dict("records"):
        line = [str(r["clients"])] + ([str(r["paper_clients"])] if scaled else [])
        line += [_pm(r["run_wall_mean_s"], r["run_wall_std_s"], tex),
                 _pm(r["t_end_to_end_mean_s"], r["t_end_to_end_std_s"], tex)]
        line += [_num(r[col]) for col, _ in stages]
        line += [_pm(r["t_mpc_mean_s"], r["t_mpc_std_s"], tex), _num(r["peak_pss_gib"]),
                 _num(r["peak_bytes_per_added_client"], 0), _num(r["paper_t_mpc_extrapolated_s"]),
                 _num(r["t_mpc_to_extrapolation"], 2), str(r["repetitions"])]
        body.append(line)
    return header, body


def caption(spec: Spec, summary: pd.DataFrame) -> str:
    slope, intercept = paper_line(spec)
    parts = [spec.title,
             "Wall: each repetition is a whole run, from building the workload to the "
             "verified result, in the sweep's process; mean ± sample std. T_end_to_end = "
             "prepare + upload + expand + T_MPC, each as the run timed it; the stages are "
             "means over repetitions (stream: the streaming clients' and servers' own "
             "clocks, where the run streams). T_MPC: the slowest party's time.",
             "Peak PSS: the largest proportional set size of the sweep's process and all "
             "its descendants (the MPC parties), sampled every 0.1 s, over the repetitions; "
             "it includes the harness's own interpreter and libraries, and with --hosts "
             "only this machine's processes. Growth per client: (peak - the previous n's "
             "peak) / (n - the previous n).",
             f"{EXTRAPOLATION[0].upper()}{EXTRAPOLATION[1:]}: the least-squares line "
             f"T_MPC = {intercept:.4f} s + {slope * 1e6:.4f} s per million clients through "
             "the paper's Table 3 (n = 1e5 to 1e6, S = 3, AWS t3.large), evaluated at the "
             "run's n. It is an EXTRAPOLATION, not a measurement, wherever n lies outside "
             "the paper's range."]
    scale = _scale_of(summary)
    if scale is not None and scale != 1.0:
        parts.append(f"Run at --scale {scale:g}: n is the sweep's n times {scale:g}.")
    return " ".join(parts)


def plot_png(summary: pd.DataFrame, spec: Spec) -> bytes:
    """Two panels against n (log axes): the times beside the extrapolation, and memory."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 4.2), dpi=120)
    times, memory = fig.subplots(1, 2)
    if not summary.empty:
        n = summary["clients"].astype(float)
        for col, std, label, marker in (
                ("run_wall_mean_s", "run_wall_std_s", "wall of the run", "o"),
                ("t_end_to_end_mean_s", "t_end_to_end_std_s", "T_end_to_end", "^"),
                ("t_mpc_mean_s", "t_mpc_std_s", "T_MPC", "s")):
            if summary[col].notna().any():
                times.errorbar(n, summary[col].astype(float),
                               yerr=summary[std].astype(float).fillna(0.0), marker=marker,
                               capsize=3, label=f"measured: {label}")
        grid = np.geomspace(n.min(), n.max(), 50) if n.max() > n.min() else n.to_numpy()
        slope, intercept = paper_line(spec)
        times.plot(grid, intercept + slope * grid, linestyle="--", color="black",
                   label=f"{EXTRAPOLATION} of T_MPC (not measured)")
        if summary["peak_pss_gib"].notna().any():
            memory.plot(n, summary["peak_pss_gib"].astype(float), marker="o",
                        label="measured: peak PSS, process tree")
    paper = paper_values()
    paper = paper[paper["table"] == spec.paper]
    times.plot(paper["clients"].astype(float), paper["t_mpc_mean_s"].astype(float), "ks",
               fillstyle="none", label="paper's Table 3 T_MPC (measured, S = 3)")
    memory.axhline(_TARGET_GIB, linestyle=":", color="gray", label="target: 1 GiB at every n")
    if not memory.has_data():  # rows that predate the measurement: say so, not a blank
        memory.text(0.5, 0.5, "peak memory not measured", ha="center",
                    transform=memory.transAxes)
    for ax, ylabel in ((times, "seconds"), (memory, "peak PSS (GiB)")):
        if ax.has_data():
            ax.set_xscale("log")
        ax.set_xlabel("clients n")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    times.set_yscale("log")
    scale = _scale_of(summary)
    at = f" (measured at scale {scale:g})" if scale is not None and scale != 1.0 else ""
    times.set_title(f"{spec.name}: time against n{at}", fontsize=10)
    memory.set_title(f"{spec.name}: peak memory against n{at}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def markdown(spec: Spec, summary: pd.DataFrame, notes: list[str]) -> str:
    header, body = _layout(summary, tex=False)
    return (f"{caption(spec, summary)}\n\n{markdown_table(header, body)}"
            + "".join(f"\n{line}\n" for line in notes))


def write_scale(raw: pd.DataFrame, table: str, out_dir: Path, *,
                repeat: int | None = None) -> list[Path]:
    """``<table>.csv``, ``.md``, ``.tex`` and ``.png`` of the scale sweep; return them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(table)
    summary = summarize_scale(raw, table)
    notes = coverage(raw, table, repeat).lines()
    header, body = _layout(summary, tex=True) if not summary.empty else ([], [])
    tex = tex_table(header or ["n"], body, caption(spec, summary), f"tab:ltm-{table}")
    tex += "".join(f"% {line}\n" for line in notes)
    return [
        write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        write_atomic(out_dir / f"{table}.md", markdown(spec, summary, notes)
                     if not summary.empty else f"{caption(spec, summary)}\n\n(no runs)\n"),
        write_atomic(out_dir / f"{table}.tex", tex),
        write_atomic(out_dir / f"{table}.png", plot_png(summary, spec)),
    ]

