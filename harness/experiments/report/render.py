"""The tables as text: numbers, Markdown, LaTeX, captions, notes and the plot.

Everything here turns a summary (:mod:`.tables`) into what a reader sees; no
file is written.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from harness.experiments.report.tables import _has_end_to_end, _scale_of
from harness.experiments.sweeps import Spec, paper_values
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host


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


END_TO_END_CAPTION = ("T_end_to_end: the clients' stream (prepare, with the upload and the "
                      "seeds' expansion where they ran in it, else added) plus the MPC after "
                      "it, per repetition, mean ± std (upload 0 where the share files are "
                      "written in place; where the servers summed the stream, or the parties "
                      "read it as it came, only the MPC after it is added).")


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


def _table_markdown(spec: Spec, summary: pd.DataFrame) -> str:
    header, body = _layout(summary, spec, tex=False)
    return f"{caption(spec, summary)}\n\n{markdown_table(header, body)}"

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
