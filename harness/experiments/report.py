"""From raw sweep rows to the paper's Tables 3-5: CSV, Markdown, LaTeX, a plot, a report.

Raw rows are one per party per repetition (``raw.jsonl``, written by the sweep
runner). Per cell:

- T_MPC of a repetition is its slowest party's ``time_s`` (the servers run in
  parallel; the sketch is ready when the last one is done). The table gives the
  mean and the sample std (ddof=1; n/a with one repetition) over repetitions.
  A repetition missing a party's row cannot give its slowest party: it is left
  out and reported.
- T_end_to_end of a repetition (``t_end_to_end_s``, the same in each party's
  row) is prepare + upload + expand + T_MPC as ``ltm run`` measures it. It is
  shown beside T_MPC, never instead of it, and only when the rows hold it:
  rows written before it existed lack the column and their tables look as
  they did.
- C_MPC is the measured ``c_mpc_mb`` (the clients' uploads to all servers plus
  the data the servers sent), mean over repetitions, beside the paper's model
  S * 8 * (s*n*d + m*d) bytes at the run's n.
- Each cell is compared with the paper's row of the same table, s and paper n
  (Table 5's two variants both with the same row). At ``--scale`` != 1 the run's
  n is not the paper's: the ratios measured/paper are still against the paper's
  unscaled values and the captions say they are not like-for-like. Scaling the
  paper's T linearly would assume what is being measured; C / model is
  like-for-like at any scale.

A row with ``verified`` not true means a revealed sketch differed from the
plaintext result; such a sweep is refused, never averaged.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.errors import InputError
from harness.experiments.results import migrate_rows
from harness.experiments.sweeps import Spec, c_mpc_model_mb, load_spec, paper_values
from harness.fileio import write_atomic

__all__ = [
    "RAW_COLUMNS",
    "SUMMARY_COLUMNS",
    "Coverage",
    "caption",
    "comparison_notes",
    "coverage",
    "markdown_table",
    "summarize",
    "tex_table",
    "write_all",
    "write_report",
    "write_table",
]

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


# --- the numbers ------------------------------------------------------------


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


# --- formatting -------------------------------------------------------------


def _decimals(x: float, least: int) -> int:
    # The paper's style is 3 decimals; below 0.1 keep 3 significant digits instead.
    if pd.isna(x) or x == 0:
        return least
    return max(least, 2 - math.floor(math.log10(abs(x))))


def _num(x: float, least: int = 3, like: float | None = None) -> str:
    """``x`` with at least ``least`` decimals, as many as ``like`` (default ``x``) needs."""
    if x is None or pd.isna(x):
        return "n/a"
    return f"{x:.{_decimals(x if like is None else like, least)}f}"


def _pm(mean: float, std: float, tex: bool = False) -> str:
    """``mean ± std``; TeX: ``$mean \\pm std$``; a missing std (one repetition) is n/a."""
    if pd.isna(mean):
        return "n/a"
    # The std gets the mean's decimals so that the two read as one quantity.
    m, s = _num(mean), _num(std, like=mean)
    if not tex:
        return f"{m} ± {s}"
    return f"${m} \\pm {s}$" if not pd.isna(std) else f"${m} \\pm$ n/a"


def _layout(summary: pd.DataFrame, spec: Spec, tex: bool) -> tuple[list[str], list[list[str]]]:
    """The paper's columns first (n or s, T_MPC, C_MPC), then the comparison."""
    scaled = (_scale_of(summary) or 1.0) != 1.0
    multi = len(spec.variants) > 1

    def head(md: str, tx: str) -> str:
        return tx if tex else md

    cols = [head("n", "$n$") if spec.x == "clients" else head("s", "$s$")]
    if spec.x == "clients" and scaled:
        cols.append(head("paper n", "paper $n$"))
    if multi:
        cols.append("$S$" if tex else "S")
    t, c = head("T_MPC", r"$T_{\mathrm{MPC}}$"), head("C_MPC", r"$C_{\mathrm{MPC}}$")
    e2e = _has_end_to_end(summary)
    cols += [f"{t} (sec)"]
    if e2e:
        cols.append(f"{head('T_end_to_end', _TEX_MATH['T_end_to_end'])} (sec)")
    cols += [f"{c} (MB)", f"model {c} (MB)", f"paper {t} (sec)",
             f"paper {c} (MB)", f"{t} / paper", f"{c} / paper", "runs"]
    body = []
    for r in summary.itertuples():
        line = [str(r.clients) if spec.x == "clients" else str(r.sparsity)]
        if spec.x == "clients" and scaled:
            line.append(str(r.paper_clients))
        if multi:
            line.append(str(r.servers))
        line += [_pm(r.t_mpc_mean_s, r.t_mpc_std_s, tex)]
        if e2e:
            line.append(_pm(r.t_end_to_end_mean_s, r.t_end_to_end_std_s, tex))
        line += [_num(r.c_mpc_mean_mb), _num(r.model_c_mpc_mb),
                 _pm(r.paper_t_mpc_mean_s, r.paper_t_mpc_std_s, tex), _num(r.paper_c_mpc_mb),
                 _num(r.t_ratio, 2), _num(r.c_ratio, 3), str(r.repetitions)]
        body.append(line)
    return cols, body


def markdown_table(header: Sequence[str], body: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; the first column left-aligned, the rest right."""
    def cell(text: str) -> str:
        return str(text).replace("|", r"\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "| " + " | ".join([":---"] + ["---:"] * (len(header) - 1)) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                "^": r"\textasciicircum{}", "±": r"$\pm$", "×": r"$\times$"}
_TEX_MATH = {"T_MPC": r"$T_{\mathrm{MPC}}$", "C_MPC": r"$C_{\mathrm{MPC}}$",
             "T_end_to_end": r"$T_{\mathrm{end\textrm{-}to\textrm{-}end}}$"}


def _tex_text(text: str) -> str:
    parts = re.split(r"(T_end_to_end|T_MPC|C_MPC)", text)
    return "".join(_TEX_MATH[p] if p in _TEX_MATH else
                   "".join(_TEX_SPECIAL.get(ch, ch) for ch in p) for p in parts)


def tex_table(header: Sequence[str], body: Iterable[Sequence[str]], caption: str,
              label: str) -> str:
    """A LaTeX table in the paper's style (|c|...|, \\hline); needs no extra packages."""
    lines = [
        "% Written by ltm-harness (harness.experiments.report).",
        r"\begin{table}[h]",
        f"    \\caption{{{_tex_text(caption)}}}",
        f"    \\label{{{label}}}",
        r"    \centering",
        f"    \\begin{{tabular}}{{|{'|'.join('c' * len(header))}|}}",
        r"        \hline",
        "        " + " & ".join(header) + r" \\",
        r"        \hline",
    ]
    lines += ["        " + " & ".join(row) + r" \\" for row in body]
    lines += [r"        \hline", r"    \end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _paper_servers_text(spec: Spec) -> str:
    paper = paper_values()
    paper = paper[paper["table"] == spec.paper]
    said = sorted(set(paper["servers"]))
    implied = sorted(set(paper["servers_by_comm"]))
    text = f"S = {', '.join(map(str, said))}"
    if implied != said:
        text += f" in its caption, while its C_MPC matches S = {', '.join(map(str, implied))}"
    return text


def caption(spec: Spec, summary: pd.DataFrame) -> str:
    """The table's caption: what it reproduces, how the numbers are made, the scale caveat."""
    table_no = re.sub(r"\D", "", spec.paper) or spec.paper
    scale = _scale_of(summary)
    parts = [f"Reproduction of the paper's Table {table_no}: {spec.title}",
             "T_MPC: mean ± sample std over repetitions of the slowest party's time. "
             "C_MPC: measured clients' uploads plus data the servers sent, mean over "
             "repetitions; model: S*8*(s*n*d + m*d) bytes at the run's n.",
             f"Paper values for S as in the paper ({_paper_servers_text(spec)})."]
    if _has_end_to_end(summary):
        parts.append(END_TO_END_CAPTION)
    if scale is not None and scale != 1.0:
        parts.append(f"Run at --scale {scale:g}: n is the paper's n times {scale:g} (at least "
                     "m), so the ratios to the paper compare different n and are not "
                     "like-for-like; C_MPC / model is.")
    return " ".join(parts)


END_TO_END_CAPTION = ("T_end_to_end: prepare + upload + expand + T_MPC per repetition, mean ± "
                      "std (upload 0 where the share files are written in place).")


def end_to_end_lines(raw: pd.DataFrame) -> list[str]:
    """What T_end_to_end holds in these rows, for report.md; none for rows without it."""
    if "t_end_to_end_s" not in raw.columns or raw["t_end_to_end_s"].isna().all():
        return []
    rows = raw[raw["t_end_to_end_s"].notna()]
    measured = rows["upload_measured"].astype(bool) if "upload_measured" in rows.columns \
        else pd.Series(False, index=rows.index)
    sharings = sorted(set(rows["sharing"].fillna("full"))) if "sharing" in rows.columns \
        else ["full"]
    upload = ("measured in every repetition (through the emulated network or from the "
              "clients' host)" if measured.all() else
              "not measured: the share files are written in place on this machine, so it "
              "counts as 0 s" if not measured.any() else
              "measured in some repetitions and counted as 0 s in the others (share files "
              "written in place)")
    reused = rows["inputs_reused"].fillna(False).astype(bool) if "inputs_reused" in rows \
        else pd.Series(False, index=rows.index)
    inputs = ("Inputs: every repetition prepared (and sent) its own." if not reused.any() else
              "Inputs: prepared once per cell; the later repetitions reran the servers on "
              "the same share files (a fresh run of the same computation), so their prepare, "
              "upload and expand are the first repetition's and only T_MPC varies "
              "(`--fresh-inputs` prepares anew every time).")
    return [
        "T_end_to_end is shown beside the paper's T_MPC, never instead of it: per "
        "repetition, the clients' preparation of every share (prepare), their upload to "
        "the servers, the servers' expansion of seeded shares (expand, the slowest "
        "server; 0 with full sharing) and T_MPC. The paper's T_MPC counts only the "
        "servers' computation.",
        f"Upload: {upload}.",
        f"Sharing: {', '.join(sharings)}"
        + (" (seeded: all but one component travel as 32-byte seeds per client, "
           "computationally hiding; the clients' upload is then below the full-sharing "
           "model)." if "seeded" in sharings else "."),
        inputs,
    ]


# --- the plot ---------------------------------------------------------------


def _plot_png(summary: pd.DataFrame, spec: Spec) -> bytes:
    # Imported here: matplotlib costs half a second, which every `ltm` call would pay.
    from matplotlib.figure import Figure

    # A bare Figure renders with Agg and leaves pyplot's global state alone.
    fig = Figure(figsize=(6.4, 4.2), dpi=120)
    ax = fig.add_subplot()
    for variant in spec.variants:
        part = summary[summary["variant"] == variant.label]
        if part.empty:
            continue
        label = f"measured, S = {variant.servers}"
        ax.errorbar(part[spec.x].astype(float), part["t_mpc_mean_s"].astype(float),
                    yerr=part["t_mpc_std_s"].astype(float).fillna(0.0), marker="o",
                    capsize=3, label=label)
    paper = paper_values()
    paper = paper[paper["table"] == spec.paper].sort_values(spec.x)
    ax.errorbar(paper[spec.x].astype(float), paper["t_mpc_mean_s"].astype(float),
                yerr=paper["t_mpc_std_s"].astype(float), marker="s", linestyle="--",
                capsize=3, color="black", label=f"paper ({_paper_servers_text(spec)})")
    scale = _scale_of(summary)
    if spec.x == "clients" and scale is not None and scale != 1.0:
        # Measured and paper n lie a factor `scale` apart: log axes keep both readable.
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("clients n" if spec.x == "clients" else "sparsity s")
    ax.set_ylabel("T_MPC (s), mean ± std")
    title = f"{spec.name}: T_MPC against {'n' if spec.x == 'clients' else 's'}"
    if scale is not None and scale != 1.0:
        title += f" (measured at scale {scale:g})"
    if summary.empty:
        title += " (no measurements)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# --- files ------------------------------------------------------------------


_write_atomic = write_atomic


def _table_markdown(spec: Spec, summary: pd.DataFrame) -> str:
    header, body = _layout(summary, spec, tex=False)
    return f"{caption(spec, summary)}\n\n{markdown_table(header, body)}"


def write_table(raw: pd.DataFrame, table: str, out_dir: Path, *,
                repeat: int | None = None) -> list[Path]:
    """Write ``<table>.csv``, ``.md``, ``.tex`` and ``.png`` to ``out_dir``; return them.

    ``repeat``: the repetitions asked for (default: the spec's), for the coverage notes.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(table)
    summary = summarize(raw, table)
    cov = coverage(raw, table, repeat)
    header, body = _layout(summary, spec, tex=True)
    notes = cov.lines()
    md = _table_markdown(spec, summary) + "".join(f"\n{line}\n" for line in notes)
    tex = tex_table(header, body, caption(spec, summary), f"tab:ltm-{table}")
    if notes:
        tex += "".join(f"% {line}\n" for line in notes)
    return [
        _write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        _write_atomic(out_dir / f"{table}.md", md),
        _write_atomic(out_dir / f"{table}.tex", tex),
        _write_atomic(out_dir / f"{table}.png", _plot_png(summary, spec)),
    ]


def _range(values: pd.Series, digits: int) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) \
        else f"{lo:.{digits}f}-{hi:.{digits}f}"


def comparison_notes(summary: pd.DataFrame, spec: Spec) -> list[str]:
    """One sentence per variant on measured vs paper, computed from the ratios."""
    if summary.empty:
        return ["No measurements for this table yet."]
    notes = []
    scale = _scale_of(summary)
    for variant in spec.variants:
        part = summary[(summary["variant"] == variant.label)
                       & summary["t_ratio"].notna()].sort_values(spec.x)
        who = f"S = {variant.servers}" + (f" ({variant.note})" if variant.note else "")
        if part.empty:
            notes.append(f"{who}: no cells measured.")
            continue
        gm = math.exp(float(np.log(part["t_ratio"].astype(float)).mean()))
        speed = ("within 10% of the paper" if 0.9 <= gm <= 1.1 else
                 f"{1 / gm:.2f}x faster than the paper" if gm < 1 else
                 f"{gm:.2f}x slower than the paper")
        text = (f"{who}, {len(part)} of {len(spec.cells) // len(spec.variants)} cells: "
                f"T_MPC / paper {_range(part['t_ratio'], 2)} (geometric mean {gm:.2f}, "
                f"{speed}); C_MPC / paper {_range(part['c_ratio'], 3)}; C_MPC / model "
                f"{_range(part['c_model_ratio'], 3)}.")
        if len(part) > 1:
            first, last = part.iloc[0], part.iloc[-1]
            grow = last["t_mpc_mean_s"] / first["t_mpc_mean_s"]
            paper_grow = last["paper_t_mpc_mean_s"] / first["paper_t_mpc_mean_s"]
            xname = "n" if spec.x == "clients" else "s"
            text += (f" From {xname} = {first[spec.x]} to {last[spec.x]} T_MPC grows "
                     f"{grow:.2f}x (paper: {paper_grow:.2f}x over its {xname}).")
        notes.append(text)
    if scale is not None and scale != 1.0:
        notes.append(f"At scale {scale:g} the paper's n differs from the run's: the ratios to "
                     "the paper are not like-for-like.")
    return notes


def _unique(raw: pd.DataFrame, column: str) -> str:
    if column not in raw.columns or raw.empty:
        return "n/a"
    values = sorted({str(v) for v in raw[column].dropna().unique()})
    return ", ".join(values) if values else "n/a"


def write_report(raw: pd.DataFrame, tables: list[str], out_dir: Path, *, machine: dict,
                 settings: dict) -> Path:
    """Write ``report.md``: settings, machine, each table inline with its plot and notes.

    It links each table's files by name; :func:`write_table` writes them (or call
    :func:`write_all` for both). An int ``settings["repeat"]`` overrides the specs'
    repetitions in the coverage notes.
    """
    repeat = settings.get("repeat") if isinstance(settings.get("repeat"), int) else None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = raw[raw["table"].isin(tables)] if "table" in raw.columns else raw
    lines = ["# Reproduction of the paper's Tables 3-5", "", "## Settings", ""]
    lines += [f"- {key}: {value}" for key, value in settings.items() if key != "left out"]
    # What the rows themselves say, in case they came from runs with other settings.
    lines.append("- in the raw rows: " + "; ".join(
        f"{name} {_unique(chosen, column)}" for column, name in (
            ("program", "program"), ("network", "network"), ("scale", "scale"),
            ("protocol", "protocol"), ("sharing", "sharing"), ("hosts", "hosts"),
            ("host", "host names"))))
    lines += ["", "## Machine", ""]
    for key in ("host", "cpu", "cpu_count", "platform", "python"):
        if key in machine:
            lines.append(f"- {key}: {machine[key]}")
    lines += [f"- MP-SPDZ version: {_unique(chosen, 'mp_spdz_version')}",
              f"- harness version: {_unique(chosen, 'harness_version')}"]
    e2e = end_to_end_lines(chosen)
    if e2e:
        lines += ["", "## T_end_to_end", ""] + [f"- {line}" for line in e2e]
    for table in tables:
        spec = load_spec(table)
        if spec.protocols:
            lines += ["", f"## {table}", "",
                      (out_dir / f"{table}.md").read_text().rstrip()
                      if (out_dir / f"{table}.md").exists() else "(not written yet)", "",
                      f"![{table}: T_MPC against n per protocol]({table}.png)", "",
                      f"Files: [{table}.csv]({table}.csv), [{table}.md]({table}.md), "
                      f"[{table}.tex]({table}.tex), [{table}.png]({table}.png)."]
            continue
        summary = summarize(raw, table)
        cov = coverage(raw, table, repeat)
        lines += ["", f"## {table}", "", _table_markdown(spec, summary).rstrip(), "",
                  f"![{table}: T_MPC, measured and the paper's]({table}.png)", "",
                  f"Files: [{table}.csv]({table}.csv), [{table}.md]({table}.md), "
                  f"[{table}.tex]({table}.tex), [{table}.png]({table}.png).", "",
                  "Comparison with the paper:", ""]
        lines += [f"- {note}" for note in comparison_notes(summary, spec)]
        if cov.lines():
            lines += ["", "Coverage:", ""] + [f"- {line}" for line in cov.lines()]
    return _write_atomic(out_dir / "report.md", "\n".join(lines) + "\n")


def write_all(raw: pd.DataFrame, tables: list[str], out_dir: Path, *, machine: dict,
              settings: dict) -> list[Path]:
    """Every table's files and then ``report.md``."""
    repeat = settings.get("repeat") if isinstance(settings.get("repeat"), int) else None
    paths = []
    for table in tables:
        if load_spec(table).protocols:
            paths += write_security(raw, table, out_dir, repeat=repeat,
                                    left_out=settings.get("left out"))
        else:
            paths += write_table(raw, table, out_dir, repeat=repeat)
    return paths + [write_report(raw, tables, out_dir, machine=machine, settings=settings)]



# --- the security sweep -----------------------------------------------------

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


def _left_out_lines(left_out: dict | None) -> list[str]:
    """``{"spdz2k fast": {reason: ["n=100000 s=1", ...]}}`` as one sentence per reason."""
    return [f"Left out: {what} at {', '.join(points)}: {why.rstrip('.')}."
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
        _write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        _write_atomic(out_dir / f"{table}.md", md),
        _write_atomic(out_dir / f"{table}.tex", tex),
        _write_atomic(out_dir / f"{table}.png", _security_plot(summary, spec)),
    ]
