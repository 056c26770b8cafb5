"""The analyst's side: what a revealed sketch is good for, and how good.

Owns the analyses on a sketch (:mod:`.analysis`: low-rank projection and ridge
regression), the baselines and mechanisms they are compared with
(:mod:`.baselines`), the plaintext utility sweeps (:mod:`.utility`) and the
synthetic data and run outputs they read (:mod:`.datasets`).

May import: the top-level shared modules and :mod:`harness.clients` (the
sketch, the noise calibrations and the matrix loader). It runs no MPC.
"""

from harness.analyst.analysis import analyze_lowrank, analyze_ridge
from harness.analyst.datasets import RunOutput, load_run
from harness.analyst.utility import SweepConfig, sweep

__all__ = ["RunOutput", "SweepConfig", "analyze_lowrank", "analyze_ridge", "load_run", "sweep"]
