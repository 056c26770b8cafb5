"""The plot of one of the paper's figures: its panels, one legend, and its notes.

The notes under the legend state the row bound the calibrations assume and
whether the data exceed it (:mod:`.figure_notes` measures it), and the ridge
panels where SSP's noisy Gram was indefinite, counted in the summary.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np

from harness.analyst import baselines
from harness.analyst.figure_grid import FigureSpec

__all__ = ["COLOURS", "plot_figure"]

# Colours of the paper's captions: grey local, blue central, orange Gaussian LTM
# (p = 1), lime Laplace LTM.
COLOURS = {"local": "grey", "central": "tab:blue", "ltm-gaussian": "tab:orange",
           "ltm-laplace": "lime"}


def _label(mechanism: str, p, calibration: str = "dp") -> str:
    recipe = f", {baselines.EXPERIMENTS_LABEL}" if calibration == "experiments" else ""
    if mechanism == "ltm-gaussian":
        return f"LTM Gaussian (p=1){recipe}" if p == 1 else f"Gaussian p={p:g}"
    if mechanism == "ltm-laplace":
        return f"LTM Laplace{recipe}"
    return {"local": "local", "central": "central"}[mechanism]


def _style(mechanism: str, p) -> dict:
    if mechanism != "ltm-gaussian" or p == 1:
        return {"color": COLOURS[mechanism], "linewidth": 2.0}
    from matplotlib import colormaps

    # p < 1 between the LTM (orange) and the local model (grey): a colour map no
    # fixed curve uses, darker as p falls towards the local model.
    return {"color": colormaps["RdPu"](0.35 + 0.6 * (1.0 - p)), "linewidth": 1.0,
            "linestyle": "--"}


def _indefinite_caption(summary) -> str | None:
    """One line: the panels where SSP's noisy Gram was indefinite, from the summary."""
    if "indefinite_runs" not in summary:
        return None
    central = summary[summary["mechanism"] == "central"]
    parts = []
    for panel, part in central.groupby("panel", sort=False):
        bad = part[part["indefinite_runs"] > 0]
        if len(bad):
            parts.append(f"{panel}: {int(bad['indefinite_runs'].sum())}/{int(part['runs'].sum())}"
                         f" runs, n <= {int(bad['n'].max())}")
    if not parts:
        return None
    return ("SSP's noisy A^T A + lambda I was indefinite (its phi then varies widely between "
            "runs) in " + "; ".join(parts) + ".")


def plot_figure(summary, spec: FigureSpec, path, *, notes: list[str] | None = None) -> None:
    """One subplot per panel in the paper's layout, log-x, mean with std bars, one legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows, cols = spec.grid
    recipe = spec.calibration == "experiments"
    # about 14 x-small characters to the inch
    lines = [*(notes or []), *filter(None, [_indefinite_caption(summary)])]
    wrapped = [textwrap.fill(line, int(14 * 4.2 * cols)) for line in lines]
    note_lines = sum(text.count("\n") + 1 for text in wrapped)
    caption = 0.15 * note_lines + (0.1 if note_lines else 0.0)
    legend = 1.15 + (0.8 if recipe else 0.0) + caption  # the recipe's labels: two lines
    height = 3.2 * rows + legend + 0.05
    fig = Figure(figsize=(4.2 * cols, height))
    FigureCanvasAgg(fig)
    # Fixed margins: constrained layout measures every log-axis tick label and takes
    # seconds per panel.
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=legend / height,
                        hspace=0.45, wspace=0.28)
    axes = fig.subplots(rows, cols, squeeze=False)
    handles: dict[str, Any] = {}
    for panel in spec.panels:
        ax = axes[panel.row][panel.col]
        part = summary[summary["panel"] == panel.name]
        for (mechanism, p), curve in part.groupby(["mechanism", "p"], sort=False, dropna=False):
            p = None if p is None or (isinstance(p, float) and math.isnan(p)) else p
            mean, std = curve["error_mean"].to_numpy(), curve["error_std"].to_numpy()
            lower = np.minimum(std, np.where(mean > 0, mean * 0.999, std))
            handle = ax.errorbar(curve["n"], mean, yerr=[lower, std], capsize=2,
                                 ecolor="black", elinewidth=0.6, **_style(mechanism, p))
            handles.setdefault(_label(mechanism, p, spec.calibration), handle)
        ax.set_xscale("log")
        # One x range for all panels, also those (ridge-m) that start at a larger n.
        ax.set_xlim(min(spec.n) / 1.3, max(spec.n) * 1.3)
        if len(part) and (part["error_mean"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(panel.name, fontsize="medium")
        ax.set_xlabel("number of clients n")
        ax.set_ylabel(spec.metric)
        ax.grid(True, which="both", alpha=0.3)
    m_text = "m per panel" if spec.per_panel_m else f"m={spec.m}"
    fig.suptitle(f"{spec.name}: {spec.metric} against n (d={spec.d}, {m_text}, s={spec.s}, "
                 f"delta={spec.delta:g}, {spec.runs} runs)\n"
                 f"calibration={baselines.calibration_label(spec.calibration)}",
                 fontsize="medium", y=1 - 0.1 / height)
    labels = [textwrap.fill(label, 42) for label in handles]
    fig.legend(list(handles.values()), labels, loc="lower center",
               bbox_to_anchor=(0.5, caption / height),
               ncol=min(3 if recipe else 5, len(handles)), fontsize="small", frameon=False)
    if wrapped:
        fig.text(0.01, 0.05 / height, "\n".join(wrapped), fontsize="x-small", va="bottom")
    fig.savefig(path, dpi=110, format="png")
