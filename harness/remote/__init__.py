"""Remote hosts: the hosts inventory and parties run on other machines over SSH.

Owns the inventory format (:mod:`.hosts`), the SSH cluster (:mod:`.ssh`),
with host-key pinning, connections, remote parties and trust/check behind it in
private modules, and preparing hosts (:mod:`.setup`: the harness and MP-SPDZ).

May import: the top-level shared modules, :mod:`harness.clients` and
:mod:`harness.engine` (a remote party is an engine party started over SSH).
"""

from harness.remote.hosts import Host, Inventory, load_inventory, write_inventory
from harness.remote.ssh import HostGroupError, HostResult, SshCluster, check_hosts, trust_hosts

__all__ = [
    "Host",
    "HostGroupError",
    "HostResult",
    "Inventory",
    "SshCluster",
    "check_hosts",
    "load_inventory",
    "trust_hosts",
    "write_inventory",
]
