"""The security sweep's table: every protocol x program, each against semi2k's same cell."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.experiments.report.render import (
    _TEX_MATH,
    END_TO_END_CAPTION,
    _num,
    _pm,
    markdown_table,
    tex_table,
)
from harness.experiments.report.tables import (
    _end_to_end_stats,
    _has_end_to_end,
    _repetitions,
    _scale_of,
    _table_rows,
    coverage,
)
from harness.experiments.sweeps import Spec, load_spec
from harness.fileio import write_atomic
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

SECURITY_COLUMNS = (
    "cell", "protocol", "security", "program", "servers", "clients", "paper_clients",
    "sparsity", "rows", "dim", "scale", "repetitions", "t_mpc_mean_s", "t_mpc_std_s",
    "t_end_to_end_mean_s", "t_end_to_end_std_s", "expand_mean_s", "upload_measured",
    "sharing", "servers_sent_mb", "client_upload_mb", "model_client_upload_mb",
    "upload_model_ratio", "t_vs_semi2k", "servers_sent_vs_semi2k",
)


def summarize_security(raw: pd.DataFrame, table: str) -> pd.DataFrame:
    """One row per protocol x program x (n, s), with each one's ratio to semi2k's same cell."""
    spec = load_spec(table)
    rows = _table_rows(raw, table)
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SECURITY_COLUMNS})
    per = _repetitions(rows)
    per = per[per["complete"]]
    # Global data sent is every party's total, the same in each party's row.
    traffic = rows.groupby(["cell", "repetition"], sort=False).agg(
        servers_sent_mb=("global_data_sent_mb", "max"),
        client_upload_mb=("client_upload_mb", "first")).reset_index()
    per = per.merge(traffic, on=["cell", "repetition"])
    stats = per.groupby("cell", sort=False).agg(
        repetitions=("t_mpc_s", "size"), t_mpc_mean_s=("t_mpc_s", "mean"),
        t_mpc_std_s=("t_mpc_s", "std"), servers_sent_mb=("servers_sent_mb", "mean"),
        client_upload_mb=("client_upload_mb", "mean"))
    stats = stats.join(_end_to_end_stats(per))
    params = rows.groupby("cell", sort=False)[
        ["protocol", "security", "program", "servers", "clients", "paper_clients",
         "sparsity", "rows", "dim", "scale", "model_client_upload_mb"]].first()
    out = params.join(stats, how="inner").reset_index()
    out["upload_model_ratio"] = out["client_upload_mb"] / out["model_client_upload_mb"]
    base = out[out["protocol"] == "semi2k"].set_index(["program", "paper_clients", "sparsity"])
    key = list(zip(out["program"], out["paper_clients"], out["sparsity"], strict=True))
    for col, ratio in (("t_mpc_mean_s", "t_vs_semi2k"), ("servers_sent_mb",
                                                         "servers_sent_vs_semi2k")):
        ref = [base[col].get(k, np.nan) for k in key]
        out[ratio] = out[col].astype(float) / np.array(ref, dtype=float)
    # The table reads protocol by protocol, program by program, in the spec's order.
    rank = {c.key: (spec.protocols.index(c.protocol), spec.programs.index(c.program), i)
            for i, c in enumerate(spec.cells)}
    out["_order"] = out["cell"].map(lambda k: rank.get(k, (len(rank), 0, 0)))
    out = out.sort_values(["_order", "cell"], kind="stable").drop(columns="_order")
    return out[list(SECURITY_COLUMNS)].reset_index(drop=True)


def _security_layout(summary: pd.DataFrame, tex: bool) -> tuple[list[str], list[list[str]]]:
    scaled = (_scale_of(summary) or 1.0) != 1.0
    t = r"$T_{\mathrm{MPC}}$" if tex else "T_MPC"
    cols = ["protocol", "model", "program", "$n$" if tex else "n"]
    if scaled:
        cols.append("paper $n$" if tex else "paper n")
    e2e = _has_end_to_end(summary)
    cols += ["$s$" if tex else "s", f"{t} (sec)", f"{t} / semi2k"]
    if e2e:
        cols.append(f"{_TEX_MATH['T_end_to_end'] if tex else 'T_end_to_end'} (sec)")
    cols += ["servers sent (MB)", "sent / semi2k", "client upload (MB)", "upload / model",
             "runs"]
    body = []
    for r in summary.itertuples():
        line = [r.protocol, r.security, r.program, str(r.clients)]
        if scaled:
            line.append(str(r.paper_clients))
        line += [str(r.sparsity), _pm(r.t_mpc_mean_s, r.t_mpc_std_s, tex),
                 _num(r.t_vs_semi2k, 2)]
        if e2e:
            line.append(_pm(r.t_end_to_end_mean_s, r.t_end_to_end_std_s, tex))
        line += [_num(r.servers_sent_mb), _num(r.servers_sent_vs_semi2k, 2),
                 _num(r.client_upload_mb), _num(r.upload_model_ratio, 3), str(r.repetitions)]
        body.append(line)
    return cols, body


def _security_caption(spec: Spec, summary: pd.DataFrame) -> str:
    parts = [spec.title,
             "T_MPC: mean ± sample std over repetitions of the slowest party's time (for "
             "local: its own aggregation plus the MPC). Servers sent: MP-SPDZ's global data "
             "sent. Client upload: bytes of shares (or input text) the clients wrote for all "
             "servers; model: S x words per share x 8 x s n d bytes (8 s n d for party "
             "input). Ratios are to semi2k's same program and cell."]
    if _has_end_to_end(summary):
        parts.append(END_TO_END_CAPTION)
    if (summary["sharing"] == "seeded").any() if len(summary) else False:
        parts.append("Seeded sharing: all but one component travel as 32-byte seeds per "
                     "client, so the upload is below the model.")
    scale = _scale_of(summary)
    if scale is not None and scale != 1.0:
        parts.append(f"Run at --scale {scale:g}: n is the paper's n times {scale:g}.")
    return " ".join(parts)


def _security_plot(summary: pd.DataFrame, spec: Spec) -> bytes:
    from matplotlib.figure import Figure

    programs = [p for p in spec.programs if p in set(summary["program"])] or ["(none)"]
    fig = Figure(figsize=(4.2 * len(programs), 4.0), dpi=110)
    axes = fig.subplots(1, len(programs), squeeze=False)[0]
    s_min = summary["sparsity"].min() if len(summary) else 1
    for ax, program in zip(axes, programs, strict=True):
        part = summary[(summary["program"] == program) & (summary["sparsity"] == s_min)]
        for protocol in spec.protocols:
            line = part[part["protocol"] == protocol].sort_values("clients")
            if line.empty:
                continue
            ax.errorbar(line["clients"].astype(float), line["t_mpc_mean_s"].astype(float),
                        yerr=line["t_mpc_std_s"].astype(float).fillna(0.0), marker="o",
                        capsize=3, label=protocol)
        ax.set_yscale("log")
        ax.set_xlabel("clients n")
        ax.set_ylabel("T_MPC (s), mean ± std")
        ax.set_title(f"{program}, s = {s_min}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _left_out_lines(left_out: dict | None, label: str = "Left out") -> list[str]:
    """``{"spdz2k fast": {reason: ["n=100000 s=1", ...]}}`` as one sentence per reason
    (``label``: "Run once" for the cells that ran once)."""
    return [f"{label}: {what} at {', '.join(points)}: {why.rstrip('.')}."
            for what, reasons in (left_out or {}).items() for why, points in reasons.items()]


def write_security(raw: pd.DataFrame, table: str, out_dir: Path, *, repeat: int | None,
                   left_out: dict | None) -> list[Path]:
    """``<table>.csv``, ``.md``, ``.tex`` and ``.png`` of a per-protocol sweep."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(table)
    summary = summarize_security(raw, table)
    cov = coverage(raw, table, repeat)
    notes = _left_out_lines(left_out) + [
        line for line in cov.lines()
        if not line.startswith("Missing cells") or not left_out]
    header, body = _security_layout(summary, tex=False)
    md = (f"{_security_caption(spec, summary)}\n\n{markdown_table(header, body)}"
          + "".join(f"\n{line}\n" for line in notes))
    header, body = _security_layout(summary, tex=True)
    tex = tex_table(header, body, _security_caption(spec, summary), f"tab:ltm-{table}")
    tex += "".join(f"% {line}\n" for line in notes)
    return [
        write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        write_atomic(out_dir / f"{table}.md", md),
        write_atomic(out_dir / f"{table}.tex", tex),
        write_atomic(out_dir / f"{table}.png", _security_plot(summary, spec)),
    ]
