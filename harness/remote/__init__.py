"""Remote hosts: the hosts inventory and parties run on other machines over SSH.

Owns the inventory format (:mod:`.hosts`), the SSH cluster (:mod:`.ssh`, a
:class:`harness.engine.Cluster`), with host-key pinning, connections, remote
parties, the group that runs them and trust/check behind it in private
modules, preparing hosts (:mod:`.setup`, with the harness's wheel in
:mod:`.wheel` and MP-SPDZ in :mod:`.bundle`), and the one program the hosts
themselves run (:mod:`.agent`: a server taking its stream, a client host
streaming its clients' shares), and loopback hosts
(:mod:`.loopback`: sshd servers on this machine standing in for the parties' machines).

May import: the top-level shared modules, :mod:`harness.clients` and
:mod:`harness.engine` (a remote party is an engine party started over SSH).

:class:`Stop` and :func:`parallel` are how a command acting on many machines at once
stops within a moment of a signal (``ltm hosts setup`` here; cloud commands may use
them the same way).

The names load lazily: a host running ``python -m harness.remote.agent``
should not pay for paramiko on every step.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

# paramiko's transport thread logs its failures with a traceback (a socket closed by a
# stop signal mid-handshake, a host that hangs up); with no handler anywhere Python
# prints them on stderr, over the harness's own one-line message. The harness says what
# failed itself, so paramiko's log goes nowhere unless a caller configures logging.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_LAZY = {
    "DEFAULT_BASE_PORT": "harness.remote.hosts",
    "check_distinct": "harness.remote.hosts",
    "wait_for_marker": "harness.remote.setup",
    "Host": "harness.remote.hosts",
    "Inventory": "harness.remote.hosts",
    "load_inventory": "harness.remote.hosts",
    "write_inventory": "harness.remote.hosts",
    "HostGroupError": "harness.remote.ssh",
    "HostResult": "harness.remote.ssh",
    "SshCluster": "harness.remote.ssh",
    "check_hosts": "harness.remote.ssh",
    "trust_hosts": "harness.remote.ssh",
    "setup_hosts": "harness.remote.setup",
    "fetch_host_key": "harness.remote._keys",
    "known_target": "harness.remote._keys",
    "Stop": "harness.remote._stop",
    "Stopped": "harness.remote._stop",
    "parallel": "harness.remote._results",
    "check_loopback": "harness.remote.loopback",
    "loopback_servers": "harness.remote.loopback",
    "start_loopback": "harness.remote.loopback",
    "stop_loopback": "harness.remote.loopback",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Not cached here: the defining module's attribute stays the one truth (a name
    # patched there and restored must not stay patched here).
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
