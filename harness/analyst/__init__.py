"""The analyst's side: what a revealed sketch is good for, and how good.

Owns the analyses on a sketch (:mod:`.analysis`: low-rank projection and ridge
regression), the baselines and mechanisms they are compared with
(:mod:`.baselines`), the plaintext utility sweeps (:mod:`.utility`), the
paper's own figures from exact sufficient statistics (:mod:`.figures`), its
Tables 6-7 on the UCI datasets (:mod:`.uci`) and the synthetic data and run
outputs they read (:mod:`.datasets`).

May import: the top-level shared modules and :mod:`harness.clients` (the
sketch, the noise calibrations and the matrix loader). It runs no MPC.
"""

from harness.analyst.analysis import analyze_lowrank, analyze_ridge
from harness.analyst.audit import (
    AUDIT_CALIBRATIONS,
    AUDIT_NOISES,
    AuditConfig,
    AuditResult,
    audit,
    trials_needed,
)
from harness.analyst.datasets import RunOutput, load_run
from harness.analyst.figures import FigureSpec, figure_spec, reproduce_figure
from harness.analyst.uci import reproduce_table
from harness.analyst.utility import SweepConfig, sweep

__all__ = ["AUDIT_CALIBRATIONS", "AUDIT_NOISES", "AuditConfig", "AuditResult", "FigureSpec",
           "RunOutput", "SweepConfig", "analyze_lowrank", "analyze_ridge", "audit",
           "figure_spec", "load_run", "reproduce_figure", "reproduce_table", "sweep",
           "trials_needed"]
