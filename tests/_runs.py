"""A run's first steps, through the public API, for tests that drive the parties themselves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.clients import Prepared
from harness.engine import ClientJob, Cluster, CompiledProgram, MpSpdz
from harness.experiments import (
    RunConfig,
    Workload,
    build_workload,
    client_job,
    make_cluster,
    program_for,
)


@dataclass
class Staged:
    cfg: RunConfig  # validated
    work: Workload
    cluster: Cluster
    job: ClientJob
    prepared: Prepared
    program: CompiledProgram


def staged(mp: MpSpdz, cfg: RunConfig, workdir: Path) -> Staged:
    """The cluster ``cfg`` asks for, with the clients' inputs prepared (not delivered)
    and the program compiled, as ``ltm run`` does it before starting the parties."""
    cfg = cfg.validate()
    work = build_workload(cfg)
    program = program_for(mp, cfg, work)
    cluster = make_cluster(cfg, mp, workdir)
    job = client_job(cfg, work)
    prepared = cluster.prepare(job)
    return Staged(cfg, work, cluster, job, prepared, program)
