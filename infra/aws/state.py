"""What a cluster is made of: names and tags, the data `up`, `status` and `down`
return, the record of what one `up` created, and the files kept on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.fileio import write_atomic
from harness.remote import DEFAULT_BASE_PORT

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_INSTANCE_TYPE",
    "DEFAULT_VOLUME_GB",
    "LIVE_STATES",
    "MAX_CLIENT_HOSTS",
    "MPC_PORT_SPAN",
    "PLACEMENT_STRATEGIES",
    "TAG_CLUSTER",
    "TAG_MANAGED",
    "Ask",
    "ClusterStatus",
    "Created",
    "DownResult",
    "Entry",
    "Image",
    "InstanceInfo",
    "Log",
    "UpOptions",
    "UpResult",
    "default_state_dir",
    "instance_names",
    "local_files",
    "write_state_file",
]

TAG_CLUSTER = "ltm-harness:cluster"
TAG_MANAGED = "ltm-harness:managed"
DEFAULT_CLUSTER = "ltm-demo"
DEFAULT_INSTANCE_TYPE = "t3.large"
DEFAULT_VOLUME_GB = 20
# The MPC rule opens a fixed span, so the same group serves any party count up to it.
MPC_PORT_SPAN = 100
# At most this many client hosts: each opens a TLS stream to every server, and a slip of
# the keyboard should not launch (and bill) a fleet. Above it, split the clients up.
MAX_CLIENT_HOSTS = 16
PLACEMENT_STRATEGIES = ("auto", "cluster", "spread", "partition")
# EC2 keeps terminated instances visible for a while; they are gone for our purposes.
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")

Log = Callable[[str], None]
Ask = Callable[[str], str]


# --- data returned to callers ------------------------------------------------

@dataclass(frozen=True)
class Image:
    image_id: str
    name: str
    creation_date: str
    root_device_name: str


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    name: str
    state: str
    instance_type: str
    public_ip: str | None
    private_ip: str | None
    launch_index: int = 0
    placement_group: str | None = None


@dataclass(frozen=True)
class ClusterStatus:
    """What exists in AWS under one cluster tag."""

    name: str
    instances: tuple[InstanceInfo, ...] = ()
    security_groups: tuple[str, ...] = ()
    key_pairs: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()

    def summary(self) -> str:
        return (f"{len(self.instances)} instance(s), {len(self.security_groups)} security "
                f"group(s), {len(self.key_pairs)} key pair(s), "
                f"{len(self.placement_groups)} placement group(s)")


@dataclass(frozen=True)
class UpOptions:
    parties: int
    cluster: str = DEFAULT_CLUSTER
    instance_type: str = DEFAULT_INSTANCE_TYPE
    ami: str | None = None  # None: look up the newest Ubuntu 24.04 image
    ssh_cidr: str | None = None  # None: ask checkip.amazonaws.com for the caller's address
    harness_spec: str | None = None  # a published harness the instances pip-install
    # `ltm hosts setup --mp-spdz` once SSH answers: "release", "local", or None (skip it)
    setup: str | None = "release"
    # More instances, after the parties: the hosts that prepare and stream the clients'
    # shares; one is the inventory's [client], several its [[client]] entries.
    client_hosts: int = 0
    state_dir: Path | None = None  # None: default_state_dir()
    inventory: Path | None = None  # None: <state_dir>/<cluster>.toml
    base_port: int = DEFAULT_BASE_PORT
    placement_strategy: str = "auto"
    volume_gb: int = DEFAULT_VOLUME_GB
    wait_ssh: bool = True
    ssh_timeout: float = 600.0
    yes: bool = False


@dataclass(frozen=True)
class UpResult:
    cluster: str
    region: str
    instances: tuple[InstanceInfo, ...]
    inventory: Path
    key_file: Path
    known_hosts: Path
    placement_strategy: str
    host_keys_recorded: bool
    set_up: bool = False
    client_hosts: int = 0  # the last ones of ``instances``
    names: tuple[str, ...] = ()  # the inventory's name of each of ``instances``


@dataclass(frozen=True)
class DownResult:
    cluster: str
    terminated: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    key_pairs: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()
    local_files: tuple[Path, ...] = ()


def instance_names(parties: int, client_hosts: int) -> tuple[str, ...]:
    """The inventory's names, in launch order: ``p0`` .. for the parties, then ``client``
    for one client host (a ``[client]`` table) or ``client0``, ``client1`` .. for several
    (``[[client]]`` entries, which :mod:`harness.remote.hosts` names so by default)."""
    clients = ("client",) if client_hosts == 1 else tuple(f"client{k}"
                                                          for k in range(client_hosts))
    return tuple(f"p{i}" for i in range(parties)) + clients


# --- the record of what `up` created ----------------------------------------

@dataclass
class Entry:
    kind: str  # "placement-group" | "key-pair" | "security-group" | "instances" | "local-file"
    name: str  # the resource's name (or the file's path, or the cluster for instances)
    ids: list[str] = field(default_factory=list)


@dataclass
class Created:
    """The resources one `up` has made, in order.

    An entry is added just *before* the call that creates the resource, by
    name, and gets its id once the call returns: an interrupt in mid-call then
    still leaves enough to find the resource. Undoing only deletes resources
    that carry this cluster's tag, so a name clash with someone else's
    resource never deletes theirs.
    """

    cluster: str
    entries: list[Entry] = field(default_factory=list)

    def add(self, kind: str, name: str) -> Entry:
        entry = Entry(kind, name)
        self.entries.append(entry)
        return entry


# --- local state -------------------------------------------------------------------

def default_state_dir() -> Path:
    """Where key files and inventories go: ``$XDG_CONFIG_HOME/ltm-harness/aws``."""
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "ltm-harness" / "aws"


def local_files(state_dir: Path, cluster: str) -> list[Path]:
    candidates = [state_dir / f"{cluster}{suffix}"
                  for suffix in (".pem", ".toml", ".known_hosts")]
    return [path for path in candidates if path.exists()]


def write_state_file(path: Path, text: str, *, mode: int) -> None:
    # The key file must never exist, even briefly, with looser permissions.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text, mode=mode)
