"""Writing a sweep's files: each table's CSV, Markdown, LaTeX and PNG, and report.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.experiments.report.mechanisms import markdown as mechanisms_markdown
from harness.experiments.report.mechanisms import summarize_mechanisms, write_mechanisms
from harness.experiments.report.render import (
    _layout,
    _plot_png,
    _table_markdown,
    caption,
    comparison_notes,
    end_to_end_lines,
    tex_table,
)
from harness.experiments.report.scale import markdown as scale_markdown
from harness.experiments.report.scale import summarize_scale, write_scale
from harness.experiments.report.security import _left_out_lines, write_security
from harness.experiments.report.tables import coverage, summarize
from harness.experiments.report.validation import markdown as validation_markdown
from harness.experiments.report.validation import summarize_validation, write_validation
from harness.experiments.sweeps import TABLES, load_spec
from harness.fileio import write_atomic
from harness.optional import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host


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
        write_atomic(out_dir / f"{table}.csv", summary.to_csv(index=False)),
        write_atomic(out_dir / f"{table}.md", md),
        write_atomic(out_dir / f"{table}.tex", tex),
        write_atomic(out_dir / f"{table}.png", _plot_png(summary, spec)),
    ]

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
    title = ("Reproduction of the paper's Tables 3-5" if set(tables) & set(TABLES) else
             f"ltm reproduce {', '.join(tables)}: beside the paper's tables")
    lines = [f"# {title}", "", "## Settings", ""]
    lines += [f"- {key}: {value}" for key, value in settings.items()
              if key not in ("left out", "run once")]
    lines += [f"- {line}" for line in _left_out_lines(settings.get("run once"), "Run once")]
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
        if spec.whole_runs:
            lines += ["", f"## {table}", "",
                      scale_markdown(spec, summarize_scale(raw, table),
                                     coverage(raw, table, repeat).lines()).rstrip(), "",
                      f"![{table}: time and peak memory against n]({table}.png)", "",
                      f"Files: [{table}.csv]({table}.csv), [{table}.md]({table}.md), "
                      f"[{table}.tex]({table}.tex), [{table}.png]({table}.png)."]
            continue
        if spec.validations:
            lines += ["", f"## {table}", "",
                      validation_markdown(spec, summarize_validation(
                          raw, table, settings.get("left out")),
                          coverage(raw, table, repeat).lines()).rstrip(), "",
                      f"![{table}: the check's cost per protocol, psi against liars]"
                      f"({table}.png)", "",
                      f"Files: [{table}.csv]({table}.csv), [{table}.md]({table}.md), "
                      f"[{table}.png]({table}.png)."]
            continue
        if spec.mechanisms:
            left_out = settings.get("left out")
            lines += ["", f"## {table}", "",
                      mechanisms_markdown(spec, summarize_mechanisms(raw, table, left_out),
                                          coverage(raw, table, repeat).lines()).rstrip(), "",
                      f"![{table}: cost against the noise's std ratio]({table}.png)", "",
                      f"Files: [{table}.csv]({table}.csv), [{table}.md]({table}.md), "
                      f"[{table}.tex]({table}.tex), [{table}.png]({table}.png)."]
            continue
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
    return write_atomic(out_dir / "report.md", "\n".join(lines) + "\n")


def write_all(raw: pd.DataFrame, tables: list[str], out_dir: Path, *, machine: dict,
              settings: dict) -> list[Path]:
    """Every table's files and then ``report.md``."""
    repeat = settings.get("repeat") if isinstance(settings.get("repeat"), int) else None
    paths = []
    for table in tables:
        if load_spec(table).whole_runs:
            paths += write_scale(raw, table, out_dir, repeat=repeat)
        elif load_spec(table).validations:
            paths += write_validation(raw, table, out_dir, repeat=repeat,
                                      left_out=settings.get("left out"))
        elif load_spec(table).mechanisms:
            paths += write_mechanisms(raw, table, out_dir, repeat=repeat,
                                      left_out=settings.get("left out"),
                                      once=settings.get("run once"))
        elif load_spec(table).protocols:
            paths += write_security(raw, table, out_dir, repeat=repeat,
                                    left_out=settings.get("left out"))
        else:
            paths += write_table(raw, table, out_dir, repeat=repeat)
    return paths + [write_report(raw, tables, out_dir, machine=machine, settings=settings)]
