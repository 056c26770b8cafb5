"""How long a sweep should take, and what it costs on AWS, before running it.

The estimate plans exactly the cells the sweep would run (``plan_sweep``: cells
it leaves out, e.g. spdz2k's ``fast``, cost nothing) and charges each
repetition of a cell with V = s * n * d noisy values:

- preparing the clients' shares here: ``prepare_ns * V``;
- the parties, as the sweep waits for them (their wall time, not only T_MPC):
  ``MPC_START_S + mpc_ns * V``;
- with ``--sharing seeded``: the clients' extra expansion of each seeded
  component, and the slowest server's expansion of its own (``expand``);
- a fixed ``SETUP_S`` for everything else in a repetition;
- uploading every server's shares from one client machine at a given
  bandwidth times the share of it that TLS over TCP delivers (measured through
  the emulated network; locally the files are written in place);

plus setting the hosts up once; a ``--mechanism central`` cell adds its coins
(:mod:`.mpc_time`, whose estimate also warns before a long ``ltm run`` and shows its
MPC's progress). ``prepare_ns`` and ``mpc_ns`` are per protocol
x program (:data:`COST_NS`): the ``reference`` program reads every value
through MP-SPDZ's input and costs 10-100 times ``fast``, most of all under the
replicated protocols. A model for planning, calibrated on this 2-core machine:
the report of the finished sweep has the real numbers.

On AWS the inventory's ``[client]`` host is one machine: its NIC carries
every server's shares, so the upload takes all servers' bytes at that one
link's rate. (The emulated network's clients stand for n separate devices
instead, see :mod:`harness.engine.netns`; the rate per link is what carries over.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.clients import components
from harness.errors import InputError, LtmError
from harness.experiments.config import RunConfig, default_input_mode
from harness.experiments.mpc_time import COST_NS, MPC_START_S, mpc_seconds
from harness.experiments.workload import upload_model_mb
from harness.privacy import DEFAULT_MECHANISM, mechanism_class

if TYPE_CHECKING:
    from harness.experiments.config import ReproduceConfig
    from harness.experiments.sweeps import Cell
    from harness.privacy import Mechanism

__all__ = ["COST_NS", "CellCost", "Estimate", "cell_cost", "estimate_sweep", "HOSTS_SETUP_S",
           "MPC_START_S", "SETUP_S", "UPLOAD_GOODPUT"]

# The rest of a repetition (workload per cell, certificates, directories,
# verification, clean-up): the mean of the time between consecutive
# repetitions' stamps (1 s resolution) minus their prepare_s and wall_s, same rows
# (the pauses of more than 15 minutes between sessions left out).
SETUP_S = 3.3
# --sharing seeded (benchmarks/README, clients.py: 50M values at S = 3, client j
# sending component j mod 3 in full, medians of three rounds at load average 6-8):
# the clients expand each of their C-1 seeded components to subtract it (prepare
# 13.5 s against 10.7 s full in the end-to-end runs: ~28 ns per value and seeded
# component, here 30), and a server expands, per component it holds, the seeds of
# the clients that do not send it in full and writes its share file (3.8 s for 2/3
# of 50M values: ~114 ns per value expanded).
SEEDED_PREPARE_NS = 30.0
EXPAND_NS = 114.0
# Once per cluster: cloud-init's OS packages and `ltm hosts setup` (the harness's
# venv from PyPI, MP-SPDZ's release); the rehearsal on this machine takes ~75 s for
# `ltm hosts setup` alone, an EC2 instance's first boot and apt a few minutes more.
HOSTS_SETUP_S = 300.0
T3_LARGE_BASELINE_GBIT = 0.512
# Measured (benchmarks/README.md, clients.py): the clients' TLS upload through an
# emulated 0.512 Gbit/s link delivered 0.485 Gbit/s of shares. tbf counts whole frames,
# so this is Ethernet, IP, TCP and TLS framing (1448 payload bytes per 1514-byte frame
# alone is 0.956), which is the same at any rate.
UPLOAD_GOODPUT = 0.485 / 0.512


@dataclass(frozen=True)
class Estimate:
    repetitions: int
    upload_gb: float
    prepare_s: float
    upload_s: float
    mpc_s: float
    setup_s: float
    instances: int
    hourly_usd: float | None
    expand_s: float = 0.0
    left_out_cells: int = 0
    upload_gbit: float | None = None  # shares per second actually delivered

    @property
    def total_s(self) -> float:
        return self.prepare_s + self.upload_s + self.expand_s + self.mpc_s + self.setup_s

    @property
    def cost_usd(self) -> float | None:
        if self.hourly_usd is None:
            return None
        return self.instances * self.hourly_usd * self.total_s / 3600

    def describe(self) -> str:
        cost = (f"${self.cost_usd:.2f} for {self.instances} instances at "
                f"${self.hourly_usd:.4f}/h" if self.cost_usd is not None else "cost unknown")
        expand = f", expand {self.expand_s / 60:.0f} min" if self.expand_s else ""
        left = (f"; {self.left_out_cells} cells left out, as the sweep would"
                if self.left_out_cells else "")
        rate = (f" at {self.upload_gbit:.3f} Gbit/s of shares" if self.upload_gbit is not None
                else "")
        return (f"{self.repetitions} repetitions, about {self.total_s / 3600:.2f} h "
                f"(prepare {self.prepare_s / 60:.0f} min, upload {self.upload_gb:.0f} GB in "
                f"{self.upload_s / 60:.0f} min{rate}{expand}, MPC {self.mpc_s / 60:.0f} min, "
                f"set-up {self.setup_s / 60:.0f} min){left}; {cost}")


@dataclass(frozen=True)
class CellCost:
    """One repetition of one cell: seconds here, and bytes the clients upload."""

    prepare_s: float
    mpc_s: float
    expand_s: float
    upload_bytes: float


def _upload_bytes(run_cfg: RunConfig, servers: int, values: int) -> float:
    if run_cfg.sharing != "seeded" or run_cfg.input_kind != "shares":
        return upload_model_mb(run_cfg, values) * 1e6
    comps = components(run_cfg.share_format, servers)
    # Client j sends component j mod C in full, the others as seeds; no padding rows.
    return float(sum(comps.upload_bytes(i, run_cfg.clients, values // run_cfg.clients)
                     for i in range(servers)))


def _central_noise(run_cfg: RunConfig, cell: Cell) -> Mechanism | None:
    """The noise of a cell whose MPC draws coins (they cost MPC time), as its run would
    draw it."""
    from harness.experiments.workload import mechanism_for

    name = cell.mechanism or DEFAULT_MECHANISM
    if not mechanism_class(name).draws_coins:
        return None
    central = dataclasses.replace(
        run_cfg, mechanism=name, rows=cell.rows, dim=cell.dim, sparsity=cell.sparsity,
        epsilon=RunConfig.epsilon if cell.epsilon is None else cell.epsilon)
    try:
        return mechanism_for(central.validate(), cell.clients, cell.dim, cell.sparsity)
    except InputError:
        return None  # refused: the sweep leaves it out, as plan_sweep says


def cell_cost(cfg: ReproduceConfig, cell: Cell) -> CellCost:
    """What one repetition of ``cell`` costs under ``cfg``'s settings (see the module)."""
    program, protocol = cell.program or cfg.program, cell.protocol or cfg.protocol
    if (protocol, program) not in COST_NS:
        raise LtmError(f"no measured cost for --protocol {protocol} --program {program}; "
                       "add it to harness/experiments/estimate.py's COST_NS")
    prepare_ns = COST_NS[(protocol, program)][0]
    run_cfg = RunConfig(out=cfg.out, parties=cell.servers, clients=cell.clients,
                        program=program, protocol=protocol, sharing=cfg.sharing,
                        input_mode=default_input_mode(program))
    values = cell.sparsity * cell.clients * cell.dim
    noise = _central_noise(run_cfg, cell)
    prepare = values * prepare_ns * 1e-9
    expand = 0.0
    if cfg.sharing == "seeded" and run_cfg.input_mode == "shares":
        comps = components(run_cfg.share_format, cell.servers)
        prepare += values * (comps.count - 1) * SEEDED_PREPARE_NS * 1e-9
        # the servers expand at once, each its own: the sweep waits for the slowest, which
        # expands each component it holds for the clients that do not lead with it
        slowest = max(sum(1 - comps.full_clients(c, cell.clients) / cell.clients
                          for c in comps.held[i]) for i in range(cell.servers))
        expand = values * slowest * EXPAND_NS * 1e-9
    return CellCost(prepare_s=prepare,
                    mpc_s=mpc_seconds(protocol, program, values, noise, cell.rows * cell.dim,
                                      cell.validate or cfg.validation),
                    expand_s=expand, upload_bytes=_upload_bytes(run_cfg, cell.servers, values))


def estimate_sweep(cfg: ReproduceConfig, *, bandwidth_gbit: float = T3_LARGE_BASELINE_GBIT,
                   instance_type: str = "t3.large", instances: int | None = None) -> Estimate:
    """The expected duration of ``cfg``'s sweep and its cost on ``instances`` machines.

    ``instances`` defaults to the largest S of the sweep plus one client machine.
    """
    from harness.experiments.reproduce import plan_sweep
    from harness.infra import hourly_price

    if not bandwidth_gbit > 0:
        raise InputError(f"the bandwidth must be positive, got {bandwidth_gbit} Gbit/s")
    cells, left_out = plan_sweep(cfg, cfg.validate())
    reps = upload_bytes = prepare = mpc = expand = 0.0
    servers = 2
    for cell, k in cells:
        cost = cell_cost(cfg, cell)
        servers = max(servers, cell.servers)
        reps += k
        upload_bytes += k * cost.upload_bytes
        prepare += k * cost.prepare_s
        mpc += k * cost.mpc_s
        expand += k * cost.expand_s
    return Estimate(repetitions=int(reps), upload_gb=upload_bytes / 1e9, prepare_s=prepare,
                    upload_s=upload_bytes * 8 / (bandwidth_gbit * 1e9 * UPLOAD_GOODPUT),
                    mpc_s=mpc, upload_gbit=bandwidth_gbit * UPLOAD_GOODPUT,
                    expand_s=expand, setup_s=reps * SETUP_S + HOSTS_SETUP_S,
                    instances=instances or servers + 1, hourly_usd=hourly_price(instance_type),
                    left_out_cells=sum(len(points) for reasons in left_out.values()
                                       for points in reasons.values()))

