"""The analyst's side: what a revealed sketch is good for, and how good.

Owns the analyses on a sketch (:mod:`.analysis`: low-rank projection and ridge
regression), the baselines and mechanisms they are compared with
(:mod:`.baselines`), the plaintext utility sweeps (:mod:`.utility`), the
paper's own figures (:mod:`.figures`: their grids in :mod:`.figure_grid`, plots in
:mod:`.figure_plot`, and in :mod:`.figure_notes` the row bound and SSP's
indefinite Gram checked against the data) from exact sufficient statistics
(:mod:`.simulate`) and the mechanisms run on them (:mod:`.mechanisms`), its
Tables 6-7 on the UCI datasets (:mod:`.uci`) and the synthetic data and run
outputs they read (:mod:`.datasets`).

May import: the top-level shared modules and :mod:`harness.clients` (the
sketch, the noise calibrations and the matrix loader). It runs no MPC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.analyst.analysis import analyze_lowrank, analyze_ridge
    from harness.analyst.audit import (
        AUDIT_CALIBRATIONS,
        AUDIT_NOISES,
        AuditConfig,
        AuditResult,
        audit,
        trials_needed,
    )
    from harness.analyst.baselines import CALIBRATIONS, EXPERIMENTS_LABEL, calibration_label
    from harness.analyst.datasets import RunOutput, load_run
    from harness.analyst.figures import DEFAULT_M as DEFAULT_FIGURE_M
    from harness.analyst.figures import FIGURES, FigureSpec, figure_spec, reproduce_figure
    from harness.analyst.mechanisms import compare_baselines
    from harness.analyst.sketch_utility import MechanismUtility
    from harness.analyst.uci import DEFAULT_TABLE_M, reproduce_table
    from harness.analyst.utility import PROBLEMS, SweepConfig, sweep
    from harness.analyst.utility import check_outputs as check_sweep_outputs
    from harness.analyst.utility import summarize as summarize_sweep
    from harness.analyst.utility import write_outputs as write_sweep_outputs

__all__ = [
    "calibration_label",
    "AUDIT_CALIBRATIONS",
    "AUDIT_NOISES",
    "AuditConfig",
    "AuditResult",
    "CALIBRATIONS",
    "EXPERIMENTS_LABEL",
    "DEFAULT_FIGURE_M",
    "DEFAULT_TABLE_M",
    "FIGURES",
    "FigureSpec",
    "MechanismUtility",
    "PROBLEMS",
    "RunOutput",
    "SweepConfig",
    "analyze_lowrank",
    "analyze_ridge",
    "audit",
    "check_sweep_outputs",
    "compare_baselines",
    "figure_spec",
    "load_run",
    "reproduce_figure",
    "reproduce_table",
    "summarize_sweep",
    "sweep",
    "trials_needed",
    "write_sweep_outputs",
]

lazy_package(__name__)
