"""The hosts inventory: which machines run the parties, and how to reach them.

An inventory is a TOML file with a few top-level settings and one ``[[party]]``
table per party, in party order (the first entry is party 0)::

    known_hosts = "known_hosts"   # trusted SSH host keys, checked by the SSH runner
    base_port = 14000             # party i listens on base_port + i
    cluster = "ltm-demo"          # optional, set by `ltm aws up`
    region = "eu-west-1"          # optional

    [[party]]
    name = "p0"
    ssh_host = "54.1.2.3"         # where this machine reaches it over SSH
    ssh_port = 22                 # optional, default 22
    user = "ubuntu"
    key = "~/.ssh/ltm-demo.pem"   # optional: without it SSH uses the agent / default keys
    mpc_host = "10.0.0.5"         # where the other parties reach it
    mp_spdz = "/home/ubuntu/.local/share/ltm-harness/mp-spdz"
    workdir = "/scratch/ltm"      # optional (default ~/.cache/ltm-harness/runs); it must
                                  # be the login user's own, mode 0700 (made so if new)
    listen = "10.0.0.5"           # optional (default mpc_host): the address its ports bind

    [client]                      # optional: the machine that prepares the clients' shares
    name = "client"
    ssh_host = "54.1.2.9"
    user = "ubuntu"
    mpc_host = "10.0.0.9"

With a ``[client]`` machine, ``ltm run --hosts`` prepares the shares there and
that machine sends each server its own shares over the ``mpc_host`` addresses,
so they never pass through this machine. It must not also be a party.

Several client machines are written as ``[[client]]`` sections instead (an
array of tables, names defaulting to ``client0``, ``client1``, ...): the
clients are then split into contiguous ranges, one per client host in
inventory order, and each host prepares and sends its own range.

Relative ``known_hosts`` and ``key`` paths are taken relative to the inventory
file's directory, so an inventory and its files can be moved together.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "DEFAULT_BASE_PORT",
    "DEFAULT_SSH_PORT",
    "DEFAULT_WORKDIR",
    "REMOTE_PYTHON",
    "REMOTE_VENV",
    "Host",
    "Inventory",
    "check_distinct",
    "load_inventory",
    "write_inventory",
]

DEFAULT_SSH_PORT = 22
DEFAULT_BASE_PORT = 14000
# In the login user's home, so that two users of one machine (a shared node, or parties
# rehearsed on one machine) never meet in one directory; checked before use either way.
DEFAULT_WORKDIR = "~/.cache/ltm-harness/runs"

_REQUIRED_HOST_FIELDS = ("name", "ssh_host", "user", "mpc_host", "mp_spdz")
_OPTIONAL_HOST_FIELDS = ("ssh_port", "key", "workdir", "listen")
_TOP_LEVEL_FIELDS = ("known_hosts", "base_port", "cluster", "region", "party", "client")
CLIENT_MP_SPDZ = "~/.local/share/ltm-harness/mp-spdz"  # the client host runs no party
# Where `ltm hosts setup` installs the harness on every host.
REMOTE_VENV = "~/.local/share/ltm-harness/venv"
REMOTE_PYTHON = f"{REMOTE_VENV}/bin/python"
_MAX_PORT = 65535


@dataclass(frozen=True, kw_only=True)
class Host:
    """One party's machine (keyword-only: several fields are easy to swap)."""

    name: str
    ssh_host: str
    ssh_port: int = DEFAULT_SSH_PORT
    user: str
    key: str | None = None  # private key path, ``~`` expanded; None: agent / default keys
    mpc_host: str  # the address the other parties reach this one at
    mp_spdz: str  # MP-SPDZ directory on that host
    workdir: str = DEFAULT_WORKDIR
    listen: str | None = None  # the address its ports are bound to; None: mpc_host

    @property
    def listen_address(self) -> str:
        return self.listen or self.mpc_host


@dataclass(frozen=True)
class Inventory:
    """The parties' machines, in party order, and the settings they share."""

    hosts: tuple[Host, ...]
    known_hosts: Path
    base_port: int = DEFAULT_BASE_PORT
    cluster: str | None = None
    region: str | None = None
    # The machines that prepare the clients' shares, each a contiguous range of clients.
    clients: tuple[Host, ...] = ()

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise InputError(f"no party named {name!r} in the inventory "
                         f"(parties: {', '.join(h.name for h in self.hosts)})")


# --- reading -----------------------------------------------------------------

def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read and validate an inventory; errors name the file, the entry and the fix."""
    path = Path(path)
    data = _read_toml(path)
    _reject_unknown(path, "the top level", data, _TOP_LEVEL_FIELDS)
    known_hosts = _known_hosts(path, data)
    entries = _party_entries(path, data)
    hosts = tuple(_parse_host(path, i, entry) for i, entry in enumerate(entries))
    clients = _client_entries(path, data)
    _check_unique_names(path, hosts + clients, parties=len(hosts))
    base_port = _port(path, "base_port", data.get("base_port", DEFAULT_BASE_PORT),
                      "e.g. base_port = 14000")
    if base_port + len(hosts) - 1 > _MAX_PORT:
        raise InputError(f"{path}: base_port = {base_port} leaves no port for party "
                         f"{len(hosts) - 1} (ports stop at {_MAX_PORT}); lower base_port")
    return Inventory(
        hosts=hosts,
        known_hosts=known_hosts,
        base_port=base_port,
        cluster=_optional_str(path, "cluster", data.get("cluster")),
        region=_optional_str(path, "region", data.get("region")),
        clients=clients,
    )


def _client_entries(path: Path, data: dict[str, Any]) -> tuple[Host, ...]:
    entry = data.get("client")
    if entry is None:
        return ()
    if isinstance(entry, dict):  # [client]: the one client host
        return (_parse_host(path, -1, {"name": "client", "mp_spdz": CLIENT_MP_SPDZ, **entry}),)
    if not isinstance(entry, list) or not entry or not all(isinstance(e, dict) for e in entry):
        raise InputError(f"{path}: 'client' must be a [client] section, or one [[client]] "
                         "section per client host")
    return tuple(_parse_host(path, -2 - k, {"name": f"client{k}", "mp_spdz": CLIENT_MP_SPDZ,
                                            **e})
                 for k, e in enumerate(entry))


def check_distinct(inv: Inventory, path: str | os.PathLike[str] | None = None) -> None:
    """Refuse two entries that are one machine: they would overwrite each other's files."""
    where = f"{path}: " if path else ""
    seen: dict[tuple[str, int], str] = {}
    for host in inv.hosts:
        key = (host.ssh_host, host.ssh_port)
        if key in seen:
            raise InputError(f"{where}parties {seen[key]!r} and {host.name!r} are the same "
                             f"machine ({host.ssh_host}:{host.ssh_port}); give each party its "
                             "own host (or its own ssh_port)")
        seen[key] = host.name
    for client in inv.clients:
        key = (client.ssh_host, client.ssh_port)
        if key in seen:
            other = seen[key]
            what = (f"client host {other!r}" if any(c.name == other for c in inv.clients)
                    else f"party {other!r}")
            raise InputError(f"{where}the client host {client.name!r} "
                             f"({client.ssh_host}:{client.ssh_port}) is also {what}; each "
                             "client host must be a machine of its own, apart from every "
                             "server and every other client host")
        seen[key] = client.name


_MAX_INVENTORY_BYTES = 1 << 20  # thousands of hosts; a bigger file is not an inventory


def _read_toml(path: Path) -> dict[str, Any]:
    if path.exists() and not path.is_file():
        raise InputError(f"{path}: not a regular file; pass the hosts inventory's TOML file")
    try:
        if path.stat().st_size > _MAX_INVENTORY_BYTES:
            raise InputError(f"{path}: {path.stat().st_size} bytes is too large for a hosts "
                             "inventory (at most 1 MiB); pass the inventory's TOML file")
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such hosts inventory; write one (see harness/remote/hosts.py "
                         "for the format) or create machines with `ltm aws up`") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); a hosts inventory is "
                         "TOML, which must be saved as UTF-8") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the hosts inventory: {exc.strerror}") from None


def _reject_unknown(path: Path, where: str, table: dict[str, Any],
                    allowed: tuple[str, ...]) -> None:
    # A misspelt optional key would otherwise be silently replaced by its default.
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))} in {where}; "
                         f"allowed keys are {', '.join(allowed)}")


def _known_hosts(path: Path, data: dict[str, Any]) -> Path:
    value = data.get("known_hosts")
    if not isinstance(value, str) or not value:
        raise InputError(f"{path}: missing or empty 'known_hosts': add known_hosts = \"<file>\" "
                         "naming the file of trusted SSH host keys (relative to this file)")
    return _resolve(path, value)


def _resolve(inventory_path: Path, value: str) -> Path:
    # Absolute, so that the runner may change directory without losing the files.
    return (inventory_path.parent / Path(value).expanduser()).absolute()


def _party_entries(path: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    entries = data.get("party", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{path}: 'party' must be an array of tables: write each party "
                         "as a [[party]] section")
    if len(entries) < 2:
        raise InputError(f"{path}: needs at least 2 parties, found {len(entries)}; "
                         "add a [[party]] section for each party")
    return entries


def _parse_host(path: Path, index: int, entry: dict[str, Any]) -> Host:
    where = _entry_label(index, entry)
    _reject_unknown(path, where, entry, _REQUIRED_HOST_FIELDS + _OPTIONAL_HOST_FIELDS)
    for field in _REQUIRED_HOST_FIELDS:
        value = entry.get(field)
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{path}: {where} is missing '{field}' (or it is not a non-empty "
                             f"string); add {field} = \"...\" to it")
    key = entry.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise InputError(f"{path}: {where} has an invalid 'key': give the private key's path "
                         "as a string, or leave it out to use the SSH agent")
    workdir = entry.get("workdir", DEFAULT_WORKDIR)
    if not isinstance(workdir, str) or not workdir:
        raise InputError(f"{path}: {where} has an invalid 'workdir': give a directory path")
    listen = entry.get("listen")
    if listen is not None and (not isinstance(listen, str) or not listen):
        raise InputError(f"{path}: {where} has an invalid 'listen': give an address of that "
                         "host for its ports, or leave it out to use mpc_host")
    return Host(
        name=entry["name"],
        ssh_host=entry["ssh_host"],
        user=entry["user"],
        mpc_host=entry["mpc_host"],
        mp_spdz=entry["mp_spdz"],
        ssh_port=_port(path, f"{where}: ssh_port", entry.get("ssh_port", DEFAULT_SSH_PORT),
                       "e.g. ssh_port = 22"),
        key=None if key is None else str(_resolve(path, key)),
        workdir=workdir,
        listen=listen,
    )


def _entry_label(index: int, entry: dict[str, Any]) -> str:
    """-1 is the one [client]; -2 - k the k-th [[client]]; else the index-th [[party]]."""
    if index == -1:
        return "[client]"
    name = entry.get("name")
    suffix = f" ({name!r})" if isinstance(name, str) and name else ""
    if index < -1:
        return f"[[client]] entry #{-1 - index}{suffix}"
    return f"[[party]] entry #{index + 1}{suffix}"


def _port(path: Path, what: str, value: Any, example: str) -> int:
    # bool is an int in Python, but `ssh_port = true` is certainly a mistake.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_PORT:
        raise InputError(f"{path}: {what} must be an integer port between 1 and {_MAX_PORT}, "
                         f"got {value!r}; {example}")
    return value


def _optional_str(path: Path, what: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InputError(f"{path}: '{what}' must be a non-empty string, got {value!r}; "
                         "fix or remove it")
    return value


def _check_unique_names(path: Path, hosts: tuple[Host, ...], parties: int | None = None
                        ) -> None:
    """Every name once: the first ``parties`` hosts are [[party]] entries, the rest
    [[client]] entries (a name is how errors and the hosts commands name a machine)."""
    parties = len(hosts) if parties is None else parties
    first_seen: dict[str, int] = {}

    def kind(i: int) -> tuple[str, int]:
        return ("party", i + 1) if i < parties else ("client", i - parties + 1)

    for i, host in enumerate(hosts):
        if host.name in first_seen:
            (a, first), (b, second) = kind(first_seen[host.name]), kind(i)
            both = (f"[[{a}]] entries #{first} and #{second}" if a == b
                    else f"[[{a}]] entry #{first} and [[{b}]] entry #{second}")
            raise InputError(f"{path}: {both} are both named {host.name!r}; give each host "
                             "a distinct name")
        first_seen[host.name] = i


# --- writing -----------------------------------------------------------------

def write_inventory(inv: Inventory, path: str | os.PathLike[str], *,
                    overwrite: bool = False) -> Path:
    """Write ``inv`` as TOML, atomically; an existing file is kept unless ``overwrite``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = format_inventory(inv, base_dir=path.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        _publish(tmp, path, overwrite)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    # link() fails if the target exists, so no concurrent writer can be clobbered
    # between a check and the rename.
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise InputError(f"{path} already exists; remove it or choose another path") from None
    except OSError:  # file systems without hard links
        if path.exists():
            raise InputError(f"{path} already exists; remove it or choose another path") from None
        os.replace(tmp, path)


def format_inventory(inv: Inventory, *, base_dir: Path | None = None) -> str:
    """The TOML text of ``inv``.

    ``known_hosts`` is written relative to ``base_dir`` when it lies inside it, so
    that the inventory and its known_hosts file can be moved together.
    """
    lines = [f"known_hosts = {_toml_str(_relative_to(inv.known_hosts, base_dir))}",
             f"base_port = {inv.base_port}"]
    if inv.cluster is not None:
        lines.append(f"cluster = {_toml_str(inv.cluster)}")
    if inv.region is not None:
        lines.append(f"region = {_toml_str(inv.region)}")
    for host in inv.hosts:
        lines += ["", "[[party]]"] + _host_lines(host)
    # One client host keeps the [client] table older inventories use.
    header = "[client]" if len(inv.clients) == 1 else "[[client]]"
    for client in inv.clients:
        lines += ["", header] + _host_lines(client)
    return "\n".join(lines) + "\n"


def _host_lines(host: Host) -> list[str]:
    lines = [
        f"name = {_toml_str(host.name)}",
        f"ssh_host = {_toml_str(host.ssh_host)}",
        f"ssh_port = {host.ssh_port}",
        f"user = {_toml_str(host.user)}",
    ]
    if host.key is not None:
        lines.append(f"key = {_toml_str(host.key)}")
    lines += [
        f"mpc_host = {_toml_str(host.mpc_host)}",
        f"mp_spdz = {_toml_str(host.mp_spdz)}",
        f"workdir = {_toml_str(host.workdir)}",
    ]
    if host.listen is not None:
        lines.append(f"listen = {_toml_str(host.listen)}")
    return lines


def _relative_to(path: Path, base_dir: Path | None) -> str:
    path = path.absolute()
    if base_dir is not None:
        try:
            return str(path.relative_to(base_dir.absolute()))
        except ValueError:
            pass  # outside the inventory's directory: keep it absolute
    return str(path)


def _toml_str(value: str) -> str:
    # A JSON string is a valid TOML basic string except that TOML also wants DEL escaped.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")
