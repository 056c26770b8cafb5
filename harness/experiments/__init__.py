"""Experiments: one verified run, the paper's sweeps, and what they write.

Owns ``ltm run``'s work (:mod:`.run`: prepare, run on local or remote parties,
verify bit for bit, write results), the sweeps of Tables 3-5 (:mod:`.sweeps`,
:mod:`.reproduce`), their tables, plots and report (:mod:`.report`), cost and
duration estimates (:mod:`.estimate`) and the result format (:mod:`.results`).

May import: the top-level shared modules, :mod:`harness.clients`,
:mod:`harness.engine`, :mod:`harness.remote` and :mod:`infra`.
"""

from harness.experiments.estimate import (
    estimate_sweep,
)
from harness.experiments.reproduce import ReproduceConfig, reproduce
from harness.experiments.results import (
    metadata,
)
from harness.experiments.run import (
    INPUT_MODES,
    PROGRAMS,
    PROTOCOLS,
    SHARINGS,
    RunConfig,
    build_workload,
    prepare_cluster,
    program_for,
    public_input_for,
    run,
)

__all__ = [
    "INPUT_MODES",
    "PROGRAMS",
    "PROTOCOLS",
    "ReproduceConfig",
    "RunConfig",
    "SHARINGS",
    "build_workload",
    "estimate_sweep",
    "metadata",
    "prepare_cluster",
    "program_for",
    "public_input_for",
    "reproduce",
    "run",
]
