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

The package: :mod:`.tables` makes the numbers (summaries, coverage),
:mod:`.render` turns them into text (Markdown, LaTeX, captions, notes, the
plot), :mod:`.security` does both for the per-protocol security sweep, and
:mod:`.validation` does both for the validation sweep (the check's cost per protocol,
the analyst's error against lying clients), :mod:`.mechanisms` does both for the
mechanisms sweep (each mechanism's cost against
its noise, and the analyst's errors), :mod:`.scale` does both for the population-scale
sweep (wall, stages and peak memory against n, beside the paper's Table 3
extrapolated), and :mod:`.files`
writes each table's files and ``report.md``.
"""

from harness.experiments.report.files import write_all, write_report, write_table
from harness.experiments.report.mechanisms import (
    MECHANISM_COLUMNS,
    headline,
    summarize_mechanisms,
    write_mechanisms,
)
from harness.experiments.report.render import (
    caption,
    comparison_notes,
    end_to_end_lines,
    markdown_table,
    tex_table,
)
from harness.experiments.report.scale import summarize_scale, write_scale
from harness.experiments.report.security import (
    SECURITY_COLUMNS,
    summarize_security,
    write_security,
)
from harness.experiments.report.tables import (
    RAW_COLUMNS,
    SUMMARY_COLUMNS,
    Coverage,
    coverage,
    summarize,
)
from harness.experiments.report.validation import (
    VALIDATION_COLUMNS,
    summarize_validation,
    validation_headline,
    write_validation,
)

__all__ = [
    "MECHANISM_COLUMNS",
    "RAW_COLUMNS",
    "SECURITY_COLUMNS",
    "SUMMARY_COLUMNS",
    "VALIDATION_COLUMNS",
    "Coverage",
    "caption",
    "comparison_notes",
    "coverage",
    "end_to_end_lines",
    "headline",
    "markdown_table",
    "summarize",
    "summarize_scale",
    "summarize_mechanisms",
    "summarize_security",
    "summarize_validation",
    "tex_table",
    "validation_headline",
    "write_all",
    "write_mechanisms",
    "write_report",
    "write_scale",
    "write_security",
    "write_table",
    "write_validation",
]
