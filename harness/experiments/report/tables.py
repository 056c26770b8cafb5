"""The numbers of a sweep's tables: each cell's summary over repetitions, and coverage.

How T_MPC, T_end_to_end and C_MPC are made from the raw rows is described in
:mod:`harness.experiments.report`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from harness.errors import InputError
from harness.experiments.results import migrate_rows
from harness.experiments.sweeps import c_mpc_model_mb, load_spec, paper_values
from harness.optional import lazy_import

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from harness.experiments.sweeps import Cell, Spec
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

RAW_COLUMNS = ("table", "variant", "cell", "servers", "clients", "paper_clients", "sparsity",
               "rows", "dim", "scale", "repetition", "party", "time_s", "c_mpc_mb", "verified")

# Summary columns, in order; the CSV holds exactly these.
SUMMARY_COLUMNS = (
    "table", "cell", "variant", "servers", "clients", "paper_clients", "sparsity", "rows", "dim",
    "scale", "repetitions", "t_mpc_mean_s", "t_mpc_std_s", "t_end_to_end_mean_s",
    "t_end_to_end_std_s", "expand_mean_s", "upload_measured", "sharing", "c_mpc_mean_mb",
    "model_c_mpc_mb", "paper_servers", "paper_servers_by_comm", "paper_t_mpc_mean_s",
    "paper_t_mpc_std_s", "paper_c_mpc_mb", "t_ratio", "c_ratio", "c_model_ratio",
)


@dataclass(frozen=True)
class Coverage:
    """What of a table's sweep is in the raw rows, and what is not."""

    table: str
    repeat: int  # repetitions the spec asks for
    missing: tuple[str, ...] = ()  # cell keys with no complete repetition
    short: dict[str, int] = field(default_factory=dict)  # key -> complete reps, 0 < k < repeat
    partial: tuple[tuple[str, int], ...] = ()  # (key, repetition) lacking a party's row
    unknown: tuple[str, ...] = ()  # cell keys in the raw rows that the spec does not have

    @property
    def complete(self) -> bool:
        return not (self.missing or self.short or self.partial)

    def lines(self) -> list[str]:
        out = []
        if self.missing:
            out.append(f"Missing cells (no complete repetition): {', '.join(self.missing)}.")
        if self.short:
            out.append(f"Cells with fewer than {self.repeat} repetitions: "
                       + ", ".join(f"{k} ({v})" for k, v in self.short.items()) + ".")
        if self.partial:
            out.append("Repetitions left out because a party's row is missing: "
                       + ", ".join(f"{k} repetition {r}" for k, r in self.partial) + ".")
        if self.unknown:
            out.append(f"Cells not in the current specification: {', '.join(self.unknown)}.")
        return out


def _table_rows(raw: pd.DataFrame, table: str) -> pd.DataFrame:
    """This table's raw rows, checked: columns present, verified, no duplicates, one scale."""
    absent = [c for c in RAW_COLUMNS if c not in raw.columns]
    if absent and len(raw):
        raise InputError(f"the raw rows lack column(s) {', '.join(absent)}; they were not "
                         "written by `ltm reproduce` of this version: rerun the sweep")
    if len(raw) == 0:
        return pd.DataFrame(columns=list(RAW_COLUMNS))
    rows = raw[raw["table"] == table].copy()
    rows["variant"] = rows["variant"].fillna("").astype(str)
    ok = rows["verified"].map(lambda v: isinstance(v, bool | np.bool_) and bool(v))
    if not ok.all():
        bad = rows[~ok].iloc[0]
        raise InputError(
            f"{bad['cell']} repetition {bad['repetition']} party {bad['party']} is not "
            f"verified (verified={bad['verified']!r}): a revealed sketch differed from the "
            "plaintext result, so its times are not averaged; find the cause and rerun the "
            "sweep into a new directory")
    dup = rows.duplicated(["cell", "repetition", "party"], keep=False)
    if dup.any():
        bad = rows[dup].iloc[0]
        raise InputError(f"{bad['cell']} repetition {bad['repetition']} party {bad['party']} "
                         "appears more than once in the raw rows; remove the duplicate lines "
                         "or rerun the sweep into a new directory")
    scales = sorted(rows["scale"].dropna().unique())
    if len(scales) > 1:
        raise InputError(f"{table}: the raw rows mix scales {scales}; report one scale at a "
                         "time (one output directory per --scale)")
    return rows


def _repetitions(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, repetition): slowest party's time, C_MPC, and completeness.

    Also T_end_to_end, the slowest server's expansion and whether the upload was
    measured (NaN where the rows predate them).
    """
    # Rows written before seeded sharing and T_end_to_end: full sharing, nothing measured.
    rows = migrate_rows(rows)
    per = rows.groupby(["cell", "repetition"], sort=False).agg(
        t_mpc_s=("time_s", "max"), c_mpc_mb=("c_mpc_mb", "mean"),
        t_end_to_end_s=("t_end_to_end_s", "max"), expand_s=("expand_s", "max"),
        upload_measured=("upload_measured", "first"), sharing=("sharing", "first"),
        parties=("party", "nunique"), servers=("servers", "first")).reset_index()
    per["complete"] = per["parties"] >= per["servers"]
    return per


def complete_repetitions(rows: pd.DataFrame, **extra: tuple[str, str]) -> pd.DataFrame:
    """:func:`_repetitions`' complete ones, with ``extra`` aggregated over each
    repetition's rows (pandas' named aggregation: column=(source, how))."""
    per = _repetitions(rows)
    per = per[per["complete"]]
    more = rows.groupby(["cell", "repetition"], sort=False).agg(**extra).reset_index()
    return per.merge(more, on=["cell", "repetition"])


def cells_in_spec_order(spec: Spec, rows: pd.DataFrame, measured: pd.DataFrame,
                        left_out: dict | None, base: Callable[[Cell], dict]) -> list[dict]:
    """One record per cell of ``spec``: its ``measured`` row (keyed by ``cell``) with
    the n it ran with, or, for a cell the sweep left out, the reason; ``base`` gives
    what every record says of its cell. A cell neither measured nor left out has none."""
    reasons = {(what, point): why for what, whys in (left_out or {}).items()
               for why, points in whys.items() for point in points}
    out = []
    for cell in spec.cells:
        found = measured[measured["cell"] == cell.key]
        if len(found):
            clients = int(rows.loc[rows["cell"] == cell.key, "clients"].iloc[0])
            out.append({**found.iloc[0].to_dict(), **base(cell), "clients": clients,
                        "left_out": ""})
        elif cell.left_out_keys in reasons:
            out.append({**base(cell), "clients": cell.clients,
                        "left_out": reasons[cell.left_out_keys]})
    return out


def _end_to_end_stats(per: pd.DataFrame) -> pd.DataFrame:
    """Per cell: T_end_to_end mean and std, mean expansion, upload measured, sharing."""
    def measured(values: pd.Series) -> object:
        known = values.dropna()
        # "partly": a resumed sweep whose repetitions differ; NaN: rows that predate it
        return np.nan if known.empty else bool(known.all()) if known.nunique() == 1 \
            else "partly"

    return per.groupby("cell", sort=False).agg(
        t_end_to_end_mean_s=("t_end_to_end_s", "mean"),
        t_end_to_end_std_s=("t_end_to_end_s", "std"), expand_mean_s=("expand_s", "mean"),
        upload_measured=("upload_measured", measured), sharing=("sharing", "first"))


def _has_end_to_end(summary: pd.DataFrame) -> bool:
    return "t_end_to_end_mean_s" in summary.columns \
        and bool(summary["t_end_to_end_mean_s"].notna().any())


def summarize(raw: pd.DataFrame, table: str) -> pd.DataFrame:
    """One row per cell with measurements (columns :data:`SUMMARY_COLUMNS`), in spec order."""
    spec = load_spec(table)
    rows = _table_rows(raw, table)
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SUMMARY_COLUMNS})
    per = _repetitions(rows)
    per = per[per["complete"]]
    stats = per.groupby("cell", sort=False).agg(
        repetitions=("t_mpc_s", "size"), t_mpc_mean_s=("t_mpc_s", "mean"),
        t_mpc_std_s=("t_mpc_s", "std"), c_mpc_mean_mb=("c_mpc_mb", "mean"))
    stats = stats.join(_end_to_end_stats(per))
    params = rows.groupby("cell", sort=False)[
        ["table", "variant", "servers", "clients", "paper_clients", "sparsity", "rows", "dim",
         "scale"]].first()
    out = params.join(stats, how="inner").reset_index()
    for col in ("servers", "clients", "paper_clients", "sparsity", "rows", "dim",
                "repetitions"):
        out[col] = out[col].astype(int)
    out["model_c_mpc_mb"] = [
        c_mpc_model_mb(r.servers, r.sparsity, r.clients, r.rows, r.dim)
        for r in out.itertuples()]
    paper = paper_values()
    paper = paper[paper["table"] == spec.paper].rename(columns={
        "clients": "paper_clients", "servers": "paper_servers",
        "servers_by_comm": "paper_servers_by_comm", "t_mpc_mean_s": "paper_t_mpc_mean_s",
        "t_mpc_std_s": "paper_t_mpc_std_s", "c_mpc_mb": "paper_c_mpc_mb"})
    out = out.merge(
        paper[["sparsity", "paper_clients", "paper_servers", "paper_servers_by_comm",
               "paper_t_mpc_mean_s", "paper_t_mpc_std_s", "paper_c_mpc_mb"]],
        on=["sparsity", "paper_clients"], how="left")
    out["t_ratio"] = out["t_mpc_mean_s"] / out["paper_t_mpc_mean_s"]
    out["c_ratio"] = out["c_mpc_mean_mb"] / out["paper_c_mpc_mb"]
    out["c_model_ratio"] = out["c_mpc_mean_mb"] / out["model_c_mpc_mb"]
    order = {c.key: i for i, c in enumerate(spec.cells)}
    out["_order"] = out["cell"].map(lambda k: order.get(k, len(order)))
    out = out.sort_values(["_order", "cell"], kind="stable").drop(columns="_order")
    return out[list(SUMMARY_COLUMNS)].reset_index(drop=True)


def coverage(raw: pd.DataFrame, table: str, repeat: int | None = None) -> Coverage:
    """Which of the spec's cells have all ``repeat`` (default: the spec's) repetitions."""
    spec = load_spec(table)
    repeat = repeat or spec.repeat
    rows = _table_rows(raw, table)
    per = _repetitions(rows) if not rows.empty else pd.DataFrame(
        columns=["cell", "repetition", "complete"])
    done = per[per["complete"].astype(bool)].groupby("cell").size().to_dict()
    partial = tuple((str(r.cell), int(r.repetition))
                    for r in per[~per["complete"].astype(bool)].itertuples())
    keys = [c.key for c in spec.cells]
    return Coverage(
        table=table, repeat=repeat,
        missing=tuple(k for k in keys if done.get(k, 0) == 0),
        short={k: int(done[k]) for k in keys if 0 < done.get(k, 0) < repeat},
        partial=partial,
        unknown=tuple(sorted(set(rows["cell"]) - set(keys))))


def _scale_of(summary: pd.DataFrame) -> float | None:
    scales = summary["scale"].dropna().unique() if len(summary) else []
    return float(scales[0]) if len(scales) else None
