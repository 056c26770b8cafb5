"""The validation sweep's tables and figure: what checking every client's row costs
under each protocol, and what it buys against lying clients.

One row per point x protocol x check x K (lying clients): T_MPC, C_MPC and the
slowest party's rounds (mean over repetitions), each also per client, T_MPC and
C_MPC as multiples of the same protocol and n without a check, the rows the MPC
rejected, and the analyst's error psi of the revealed sketches (mean ± std). A
cell the sweep left out is a row that says why. :func:`headline` is what the
sweep prints: per protocol x check, T_MPC and C_MPC per client at the largest n
measured, and psi with the most liars, with and without the check.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.experiments.report.render import _num, _pm, markdown_table
from harness.experiments.report.security import _left_out_lines
from harness.experiments.report.tables import (
    _table_rows,
    cells_in_spec_order,
    complete_repetitions,
    coverage,
)
from harness.experiments.sweeps import Cell, Spec, load_spec
from harness.fileio import write_atomic
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

__all__ = ["VALIDATION_COLUMNS", "summarize_validation", "validation_headline",
           "write_validation"]

VALIDATION_COLUMNS = (
    "cell", "clients", "paper_clients", "protocol", "program", "validate", "poison",
    "servers", "sparsity", "rows", "dim", "repetitions", "t_mpc_mean_s", "t_mpc_std_s",
    "c_mpc_mean_mb", "rounds", "t_mpc_us_per_client", "c_mpc_kb_per_client",
    "t_vs_none", "c_vs_none", "rejected_rows", "psi_mean", "psi_std", "left_out",
)
CHECKS = ("none", "linf", "l2")


def summarize_validation(raw: pd.DataFrame, table: str,
                         left_out: dict | None = None) -> pd.DataFrame:
    """One row per spec cell, measured or left out (with the reason), in the spec's order."""
    spec = load_spec(table)
    rows = _table_rows(raw, table)
    measured = pd.DataFrame(columns=["cell"])
    if not rows.empty:
        per = complete_repetitions(rows, rounds=("rounds", "max"), psi=("psi", "first"),
                                   rejected_rows=("rejected_rows", "first"))
        measured = per.groupby("cell", sort=False).agg(
            repetitions=("t_mpc_s", "size"), t_mpc_mean_s=("t_mpc_s", "mean"),
            t_mpc_std_s=("t_mpc_s", "std"), c_mpc_mean_mb=("c_mpc_mb", "mean"),
            rounds=("rounds", "mean"), psi_mean=("psi", "mean"), psi_std=("psi", "std"),
            rejected_rows=("rejected_rows", "max")).reset_index()

    def base(cell: Cell) -> dict:
        return {"cell": cell.key, "paper_clients": cell.paper_clients,
                "protocol": cell.protocol, "program": cell.program,
                "validate": cell.validate or "none", "poison": cell.poison or 0,
                "servers": cell.servers, "sparsity": cell.sparsity, "rows": cell.rows,
                "dim": cell.dim}

    out = cells_in_spec_order(spec, rows, measured, left_out, base)
    frame = pd.DataFrame(out, columns=list(VALIDATION_COLUMNS))
    n = frame["clients"].astype(float)
    frame["t_mpc_us_per_client"] = 1e6 * frame["t_mpc_mean_s"].astype(float) / n
    frame["c_mpc_kb_per_client"] = 1e3 * frame["c_mpc_mean_mb"].astype(float) / n
    none = frame[(frame["validate"] == "none") & (frame["poison"] == 0)].set_index(
        ["protocol", "paper_clients"])
    key = list(zip(frame["protocol"], frame["paper_clients"], strict=True))
    for col, ratio in (("t_mpc_mean_s", "t_vs_none"), ("c_mpc_mean_mb", "c_vs_none")):
        ref = np.array([none[col].get(k, np.nan) for k in key], dtype=float)
        frame[ratio] = frame[col].astype(float) / ref
    return frame


def _layout(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    cols = ["protocol", "n", "check", "K", "T_MPC (s)", "us / client", "x none",
            "C_MPC (MB)", "KB / client", "x none", "rounds", "rejected", "psi", "runs"]
    body = []
    for r in summary.itertuples():
        line = [r.protocol, str(r.clients), r.validate, str(r.poison)]
        if r.left_out:
            body.append(line + [f"left out: {r.left_out}"] + [""] * (len(cols) - 5))
            continue
        body.append(line + [
            _pm(r.t_mpc_mean_s, r.t_mpc_std_s), _num(r.t_mpc_us_per_client, 1),
            _num(r.t_vs_none, 2), _num(r.c_mpc_mean_mb), _num(r.c_mpc_kb_per_client, 2),
            _num(r.c_vs_none, 2), f"{r.rounds:.0f}", _count(r.rejected_rows),
            _pm(r.psi_mean, r.psi_std), f"{r.repetitions:.0f}"])
    return cols, body


def _count(x: float) -> str:
    return "n/a" if pd.isna(x) else f"{x:.0f}"


def validation_headline(summary: pd.DataFrame) -> str:
    """Per protocol x check: T_MPC and C_MPC per client at the largest n where a check
    ran (the largest measured where none did), and psi with the most liars, with and
    without the check."""
    done = summary[summary["left_out"] == ""]
    if done.empty:
        return ""
    honest = done[done["poison"] == 0]
    lines = []
    for protocol in dict.fromkeys(honest["protocol"]):
        mine = honest[honest["protocol"] == protocol]
        checked = mine[mine["validate"] != "none"]
        n = (checked if len(checked) else mine)["paper_clients"].max()
        at = mine[mine["paper_clients"] == n]
        for r in at.itertuples():
            lines.append([protocol, f"{r.clients:,}", r.validate,
                          _num(r.t_mpc_us_per_client, 1), _num(r.t_vs_none, 2),
                          _num(r.c_mpc_kb_per_client, 2), _num(r.c_vs_none, 2)])
    text = ("T_MPC and C_MPC per client at the largest n where each protocol's checks ran:\n"
            + markdown_table(
        ["protocol", "n", "check", "T_MPC us/client", "x none", "C_MPC KB/client", "x none"],
        lines))
    k = done["poison"].max()
    if k:
        liars = done[done["poison"] == k]
        n = liars["paper_clients"].max()
        liars = liars[liars["paper_clients"] == n]
        clean = done[(done["poison"] == 0) & (done["paper_clients"] == n)
                     & (done["protocol"].isin(liars["protocol"]))]
        rows = []
        for r in liars.itertuples():
            same = clean[clean["validate"] == r.validate]
            honest_psi = float(same["psi_mean"].iloc[0]) if len(same) else float("nan")
            rows.append([f"{r.clients:,}", r.validate, _num(honest_psi, 4),
                         _num(r.psi_mean, 4), _count(r.rejected_rows)])
        text += (f"\nThe analyst's psi with {k} lying clients ({liars['protocol'].iloc[0]}):\n"
                 + markdown_table(["n", "check", "psi, K = 0", f"psi, K = {k}", "rejected"],
                                  rows))
    return text


def _caption(spec: Spec, summary: pd.DataFrame) -> str:
    return (f"{spec.title} T_MPC: mean ± sample std over repetitions of the slowest "
            "party's time; C_MPC: the clients' uploads plus MP-SPDZ's global data sent; "
            "rounds: the slowest party's; x none: against the same protocol and n without "
            "a check; rejected: the rows the MPC rejected (only their number is revealed); "
            "psi: the analyst's low-rank error on the revealed sketch (mean ± std). K lying "
            "clients each send the largest words the encoding holds.")


def markdown(spec: Spec, summary: pd.DataFrame, notes: list[str]) -> str:
    header, body = _layout(summary)
    return (f"{_caption(spec, summary)}\n\n{markdown_table(header, body)}\n"
            f"{validation_headline(summary)}"
            + "".join(f"\n{line}\n" for line in notes))


def _plot(summary: pd.DataFrame) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.0), dpi=110)
    cost, psi = fig.subplots(1, 2)
    done = summary[summary["left_out"] == ""]
    honest = done[done["poison"] == 0]
    protocols = list(dict.fromkeys(honest["protocol"]))
    width = 0.8 / len(CHECKS)
    for j, check in enumerate(CHECKS):
        heights = []
        for protocol in protocols:
            mine = honest[(honest["protocol"] == protocol) & (honest["validate"] == check)]
            top = mine[mine["paper_clients"] == mine["paper_clients"].max()]
            heights.append(float(top["t_mpc_us_per_client"].iloc[0]) if len(top) else np.nan)
        cost.bar(np.arange(len(protocols)) + j * width, heights, width, label=check)
    cost.set_xticks(np.arange(len(protocols)) + width, protocols, rotation=20, fontsize=7)
    cost.set_yscale("log")
    cost.set_ylabel("T_MPC per client (us), largest n run")
    cost.set_title("cost of the check per protocol", fontsize=10)
    cost.legend(fontsize=7)
    for check in CHECKS:
        line = done[done["validate"] == check]
        if line.empty:
            continue
        n = line["paper_clients"].max()
        line = line[(line["paper_clients"] == n)
                    & (line["protocol"] == done[done["poison"] > 0]["protocol"].iloc[0]
                       if (done["poison"] > 0).any() else True)].sort_values("poison")
        psi.plot(line["poison"].astype(float), line["psi_mean"].astype(float), marker="o",
                 label=check)
    psi.set_xlabel("lying clients K")
    psi.set_ylabel("psi")
    psi.set_yscale("log")
    psi.set_title("the analyst's error against liars", fontsize=10)
    psi.legend(fontsize=7)
    for ax in (cost, psi):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_validation(raw: pd.DataFrame, table: str, out_dir: Path, *, repeat: int | None,
                     left_out: dict | None) -> list[Path]:
    """``<table>.csv``, ``.md`` and ``.png`` of the validation sweep."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(table)
    summary = summarize_validation(raw, table, left_out)
    cov = coverage(raw, table, repeat)
    notes = _left_out_lines(left_out) + [
        line for line in cov.lines() if not line.startswith("Missing cells") or not left_out]
    return [
        write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        write_atomic(out_dir / f"{table}.md", markdown(spec, summary, notes)),
        write_atomic(out_dir / f"{table}.png", _plot(summary)),
    ]
