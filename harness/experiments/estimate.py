"""How long a sweep should take, and what it costs on AWS, before running it.

Per repetition of a cell: preparing the clients' shares here (a measured
rate per share written), uploading every server's shares from one client
machine at a given bandwidth times the share of it that TLS over TCP delivers
(measured through the emulated network), the parties' T_MPC (the paper's value
for the cell: the reference point the sweep is compared with) and a fixed
set-up and clean-up cost, plus setting the hosts up once. A model for
planning, not a measurement: the report of the finished sweep has the real
numbers.

On AWS the inventory's ``[client]`` host is one machine: its NIC carries
every server's shares, so the upload takes all servers' bytes at that one
link's rate. (The emulated network's clients stand for n separate devices
instead, see :mod:`harness.engine.netns`; the rate per link is what carries over.)
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError
from harness.experiments.sweeps import expand, load_spec, paper_values

__all__ = ["Estimate", "estimate_sweep", "HOSTS_SETUP_S", "PREPARE_NS_PER_SHARE", "SETUP_S",
           "UPLOAD_GOODPUT"]

# Measured on the 2-core development machine: preparing Table 5's s = 50 cell
# (250M entries, 3 shares each) takes about 27 s, i.e. ~36 ns per share written.
PREPARE_NS_PER_SHARE = 36.0
# Certificates, connections, directories, party start-up and clean-up.
SETUP_S = 2.0
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
    upload_gbit: float | None = None  # shares per second actually delivered

    @property
    def total_s(self) -> float:
        return self.prepare_s + self.upload_s + self.mpc_s + self.setup_s

    @property
    def cost_usd(self) -> float | None:
        if self.hourly_usd is None:
            return None
        return self.instances * self.hourly_usd * self.total_s / 3600

    def describe(self) -> str:
        cost = (f"${self.cost_usd:.2f} for {self.instances} instances at "
                f"${self.hourly_usd:.4f}/h" if self.cost_usd is not None else "cost unknown")
        rate = (f" at {self.upload_gbit:.3f} Gbit/s of shares" if self.upload_gbit is not None
                else "")
        return (f"{self.repetitions} repetitions, about {self.total_s / 3600:.2f} h "
                f"(prepare {self.prepare_s / 60:.0f} min, upload {self.upload_gb:.0f} GB in "
                f"{self.upload_s / 60:.0f} min{rate}, MPC {self.mpc_s / 60:.0f} min, set-up "
                f"{self.setup_s / 60:.0f} min); {cost}")


def estimate_sweep(tables: list[str], *, repeat: int | None = None, scale: float = 1.0,
                   bandwidth_gbit: float = T3_LARGE_BASELINE_GBIT,
                   instance_type: str = "t3.large", instances: int | None = None) -> Estimate:
    """The expected duration of ``tables`` and its cost on ``instances`` machines.

    ``instances`` defaults to the largest S of the sweep plus one client machine.
    """
    from infra._pricing import hourly_price

    if not bandwidth_gbit > 0:
        raise InputError(f"the bandwidth must be positive, got {bandwidth_gbit} Gbit/s")
    paper = paper_values()
    reps = upload_bytes = prepare = mpc = 0.0
    servers = 2
    for table in tables:
        spec = load_spec(table)
        k = repeat or spec.repeat
        for cell in expand(spec, scale):
            servers = max(servers, cell.servers)
            shares = cell.servers * cell.sparsity * cell.clients * cell.dim
            row = paper[(paper["table"] == spec.paper) & (paper["sparsity"] == cell.sparsity)
                        & (paper["clients"] == cell.paper_clients)]
            t_paper = float(row["t_mpc_mean_s"].iloc[0]) * scale if len(row) else 0.0
            reps += k
            upload_bytes += k * 8 * shares
            prepare += k * shares * PREPARE_NS_PER_SHARE * 1e-9
            mpc += k * t_paper
    return Estimate(repetitions=int(reps), upload_gb=upload_bytes / 1e9, prepare_s=prepare,
                    upload_s=upload_bytes * 8 / (bandwidth_gbit * 1e9 * UPLOAD_GOODPUT),
                    mpc_s=mpc,
                    setup_s=reps * SETUP_S + HOSTS_SETUP_S, instances=instances or servers + 1,
                    hourly_usd=hourly_price(instance_type),
                    upload_gbit=bandwidth_gbit * UPLOAD_GOODPUT)
