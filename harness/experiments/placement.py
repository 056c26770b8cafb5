"""Where a run's parties live: the one place that chooses the kind of cluster.

``cfg.hosts`` decides it here, once: local parties (optionally in emulated
networks) or one party per SSH host. Everything after talks to the cluster only
through :class:`harness.engine.Cluster`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from harness.engine import Cluster, LocalCluster, MpSpdz, protocol_for
from harness.errors import InputError, MpSpdzError
from harness.experiments.config import RunConfig

if TYPE_CHECKING:
    from harness.remote import Inventory

__all__ = ["check_placement", "check_protocol_usable", "inventory_for", "make_cluster"]


def make_cluster(cfg: RunConfig, mp: MpSpdz, workdir: Path) -> Cluster:
    """Local parties (optionally in emulated networks) or one party per SSH host."""
    if cfg.hosts is not None:
        from harness.remote import SshCluster  # paramiko only when it is needed

        return SshCluster(mp, inventory_for(cfg), workdir, cfg.protocol,
                          inventory_path=cfg.hosts)
    return LocalCluster(mp, cfg.party_count, workdir, protocol=cfg.protocol,
                        network=cfg.network)


def inventory_for(cfg: RunConfig) -> Inventory:
    """The inventory's first ``cfg.parties`` hosts (party i runs on the i-th)."""
    if cfg.hosts is None:
        raise ValueError("inventory_for needs a config with hosts")
    from harness.remote import check_distinct, load_inventory  # only for --hosts

    inv = load_inventory(cfg.hosts)
    check_distinct(inv, cfg.hosts)
    parties = cfg.party_count
    if parties > len(inv.hosts):
        raise InputError(f"{parties} parties need {parties} hosts, but {cfg.hosts} "
                         f"lists {len(inv.hosts)}; add [[party]] entries or lower --parties")
    return dataclasses.replace(inv, hosts=inv.hosts[:parties])


def check_placement(cfg: RunConfig) -> None:
    """Fail on hosts or network problems before any heavy work."""
    if cfg.hosts is not None:
        inventory_for(cfg)
    if cfg.network is not None:
        from harness.engine import check_requirements

        check_requirements()


def check_protocol_usable(mp: MpSpdz, protocol: str) -> None:
    """The protocol's binary is there and this MP-SPDZ build will run it."""
    from harness.engine import unusable_reason

    mp.binary(protocol_for(protocol).binary)
    reason = unusable_reason(protocol, mp.root)
    if reason:
        raise MpSpdzError(f"--protocol {protocol} cannot run with the MP-SPDZ in {mp.root}: "
                          f"{reason}")
