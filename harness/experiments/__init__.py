"""Experiments: one verified run, the paper's sweeps, and what they write.

Owns ``ltm run``'s work (:mod:`.run`, the entry: its settings :mod:`.config`, the
table of run modes they are checked and routed by :mod:`.modes`, its workload
:mod:`.workload`, where its parties live :mod:`.placement` and one run on
them :mod:`.execute`, verified bit for bit), the sweeps of Tables 3-5
(:mod:`.sweeps`, :mod:`.reproduce`, their raw rows :mod:`.raw`) and the population-scale
sweep beside them, the process tree's peak memory (:mod:`.memory`), their tables, plots
and report (:mod:`.report`), cost and duration estimates (:mod:`.estimate`) and the result
format with its migrations (:mod:`.results`).

May import: the top-level shared modules, :mod:`harness.clients`,
:mod:`harness.engine`, :mod:`harness.remote` and :mod:`infra`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.optional import lazy_package

if TYPE_CHECKING:
    from harness.experiments.config import (
        INPUT_MODES,
        PROGRAMS,
        PROTOCOLS,
        SHARINGS,
        ReproduceConfig,
        RunConfig,
        default_input_mode,
    )
    from harness.experiments.estimate import (
        estimate_sweep,
    )
    from harness.experiments.execute import RunOutcome, ServerInputs, execute
    from harness.experiments.memory import PeakMemory, tree_pss_bytes
    from harness.experiments.modes import Mode, route_for
    from harness.experiments.placement import make_cluster
    from harness.experiments.reproduce import reproduce
    from harness.experiments.results import (
        DIAGNOSTICS,
        FORMAT_VERSION,
        RunResult,
        load_result,
        metadata,
        migrate_row,
    )
    from harness.experiments.run import run
    from harness.experiments.sweep_data import SketchUtility
    from harness.experiments.workload import (
        Workload,
        build_workload,
        client_job,
        coin_technique,
        prepare_cluster,
        program_for,
    )

__all__ = [
    "DIAGNOSTICS",
    "FORMAT_VERSION",
    "INPUT_MODES",
    "Mode",
    "PROGRAMS",
    "PROTOCOLS",
    "ReproduceConfig",
    "SketchUtility",
    "RunConfig",
    "RunOutcome",
    "RunResult",
    "SHARINGS",
    "PeakMemory",
    "ServerInputs",
    "Workload",
    "build_workload",
    "client_job",
    "coin_technique",
    "default_input_mode",
    "estimate_sweep",
    "execute",
    "load_result",
    "make_cluster",
    "metadata",
    "migrate_row",
    "prepare_cluster",
    "program_for",
    "reproduce",
    "route_for",
    "run",
    "tree_pss_bytes",
]

lazy_package(__name__)
