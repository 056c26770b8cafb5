"""``ltm hosts trust`` and ``ltm hosts check``: pinning host keys, testing access.

Trust is explicit: the runner never accepts an unknown key by itself, so the
user (or ``ltm aws up``, which scans its own fresh instances) pins the keys
once, after comparing the printed fingerprints with the machines' consoles. A
key that differs from the pinned one is refused unless ``--replace`` says the
machine was rebuilt. Nothing is written unless every host answered, so a
partial failure never leaves a half-trusted inventory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness._version import __version__
from harness.errors import LtmError
from harness.remote._connect import (
    ConnectOptions,
    HostKeyError,
    SshConnectError,
    connect,
    describe,
)
from harness.remote._keys import ServerKey, fetch_host_key, known_target, pinned_keys, write_pinned
from harness.remote._shell import shell_path
from harness.remote.hosts import Host, load_inventory
from harness.remote.wheel import harness_digest

__all__ = ["SETUP_RECORD", "HostCheck", "TrustResult", "check_hosts", "trust_hosts"]

_VERSION = re.compile(r"^## (\d+\.\d+\.\d+)", re.M)
# Written last by `ltm hosts setup` (harness.remote.setup): present means ready.
SETUP_RECORD = "~/.local/share/ltm-harness/setup.json"


@dataclass(frozen=True)
class TrustResult:
    host: Host
    target: str  # the known_hosts name: host, or [host]:port
    key: ServerKey
    status: str  # "added", "unchanged", "replaced" or "changed" (refused)
    previous: tuple[ServerKey, ...] = ()


def trust_hosts(inventory_path: str | os.PathLike[str], *, replace: bool = False,
                echo: Callable[[str], None] = print,
                confirm: Callable[[str], bool] | None = None,
                timeout: float = 10.0) -> list[TrustResult]:
    """Fetch every host's key, print its fingerprint and pin it in known_hosts.

    ``confirm`` is asked before anything is written (None: do not ask).
    """
    inventory = load_inventory(inventory_path)
    known_hosts = inventory.known_hosts
    results: list[TrustResult] = []
    seen: dict[str, TrustResult] = {}
    hosts = inventory.hosts + inventory.clients
    try:
        for host in hosts:
            target = known_target(host.ssh_host, host.ssh_port)
            if target in seen:  # several parties on one machine: one key
                results.append(TrustResult(host, target, seen[target].key, seen[target].status,
                                           seen[target].previous))
                continue
            pinned = pinned_keys(known_hosts, target)
            key = _fetch(host, timeout, tuple(k.key_type for k in pinned))
            if key in pinned:
                status = "unchanged"
            elif pinned:
                status = "replaced" if replace else "changed"
            else:
                status = "added"
            result = TrustResult(host, target, key, status, tuple(pinned))
            seen[target] = result
            results.append(result)
            echo(f"{host.name}  {target}  {key.key_type} {key.fingerprint}  {_NOTES[status]}")
    except KeyboardInterrupt:
        # Hosts are asked in turn, in this thread: the signal ends the one being asked.
        echo(f"trust interrupted: {_progress(hosts, len(results), 'answered')}; nothing was "
             "written")
        raise
    changed = [r for r in seen.values() if r.status == "changed"]
    if changed:
        detail = "; ".join(f"{describe(r.host)} now shows {r.key.fingerprint}, pinned "
                           f"{', '.join(k.fingerprint for k in r.previous)}" for r in changed)
        raise HostKeyError(
            f"SSH host key CHANGED: {detail} (in {known_hosts}). This may be an attack (man "
            "in the middle); if the machine was rebuilt, verify the new fingerprint on its "
            "console and rerun with --replace. Nothing was written")
    new = [(r.target, r.key) for r in seen.values() if r.status in ("added", "replaced")]
    if not new:
        echo(f"All {len(seen)} host key(s) were already pinned in {_shown(known_hosts)}.")
        return results
    if confirm is not None and not confirm(f"Pin {len(new)} host key(s) in {known_hosts}?"):
        raise LtmError("not confirmed; nothing was written (pass --yes to skip the question)")
    write_pinned(known_hosts, new, replace=replace)
    echo(f"Pinned {len(new)} host key(s) in {_shown(known_hosts)}.")
    return results


def _shown(path: Path) -> Path:
    """``path`` as the user would type it here: relative below the working directory."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _progress(hosts: Sequence[Host], finished: int, what: str) -> str:
    """``N of M host(s) WHAT (names), not (names)``: the summary after a signal."""
    done = ", ".join(h.name for h in hosts[:finished])
    rest = ", ".join(h.name for h in hosts[finished:])
    return (f"{finished} of {len(hosts)} host(s) {what}{f' ({done})' if done else ''}"
            f"{f', not {rest}' if rest else ''}")


_NOTES = {"added": "(new, pinned)", "unchanged": "(already pinned)",
          "replaced": "(CHANGED, replaced)", "changed": "(CHANGED: refused)"}


def _fetch(host: Host, timeout: float, prefer: tuple[str, ...]) -> ServerKey:
    try:
        return fetch_host_key(host.ssh_host, host.ssh_port, timeout=timeout, prefer=prefer)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise SshConnectError(
            f"{describe(host)}: could not read its SSH host key: {exc or type(exc).__name__}; "
            "check the host is up and sshd listens on that port. Nothing was written") from None


@dataclass(frozen=True)
class HostCheck:
    host: Host
    ok: bool
    detail: str  # the MP-SPDZ version found, or what is wrong


def check_hosts(inventory_path: str | os.PathLike[str], *,
                echo: Callable[[str], None] = print,
                options: ConnectOptions | None = None) -> list[HostCheck]:
    """Log in to every host (keys verified); report its MP-SPDZ and its harness."""
    inventory = load_inventory(inventory_path)
    digest = harness_digest()
    checks = []
    hosts = list(inventory.hosts) + list(inventory.clients)
    try:
        for host in hosts:
            check = _check(host, inventory.known_hosts, Path(inventory_path),
                           options or ConnectOptions(), digest,
                           needs_mp_spdz=host not in inventory.clients)
            checks.append(check)
            echo(f"{describe(check.host)}: {'ok' if check.ok else 'FAILED'}: {check.detail}")
    except KeyboardInterrupt:
        # One host at a time, in this thread: the signal ends the one being checked, and
        # leaving _check closes its connection (its one short command ends with it).
        echo(f"check interrupted: {_progress(hosts, len(checks), 'checked')}")
        raise
    return checks


def _check(host: Host, known_hosts: Path, inventory_path: Path,
           options: ConnectOptions, digest: str, *, needs_mp_spdz: bool = True) -> HostCheck:
    binary = f"{host.mp_spdz.rstrip('/')}/semi2k-party.x"
    try:
        client = connect(host, known_hosts, options=options, inventory_path=inventory_path)
    except LtmError as exc:
        return HostCheck(host, False, str(exc).removeprefix(f"{describe(host)}: "))
    try:
        _, stdout, _ = client.exec_command(
            f"test -x {shell_path(binary)} && echo found; "
            f"tr -d '\\n' < {shell_path(SETUP_RECORD)} 2>/dev/null && echo; "
            f"head -c 4096 {shell_path(host.mp_spdz.rstrip('/') + '/CHANGELOG.md')} "
            "2>/dev/null", timeout=options.timeout)
        out = stdout.read().decode(errors="replace")
    except (OSError, EOFError, paramiko.SSHException) as exc:
        return HostCheck(host, False, f"lost the connection: {exc}")
    finally:
        client.close()
    found = out.startswith("found")
    record = _record(out)
    harness, harness_ok = _describe_harness(record, digest)
    if not needs_mp_spdz:
        return HostCheck(host, harness_ok, f"client host; {harness}")
    if not found:
        return HostCheck(host, False, f"{binary} is missing or not executable; run `ltm hosts "
                                      "setup` (or `ltm mpspdz install` there), or fix "
                                      f"'mp_spdz' in the inventory; {harness}")
    version = _VERSION.search(out)
    binaries = ((record or {}).get("mp_spdz") or {}).get("binaries") or ["semi2k-party.x"]
    return HostCheck(host, harness_ok,
                     f"MP-SPDZ {version.group(1) if version else '(unknown version)'} at "
                     f"{host.mp_spdz} ({', '.join(binaries)}); {harness}")


def _record(out: str) -> dict | None:
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def _describe_harness(record: dict | None, digest: str) -> tuple[str, bool]:
    """What the host's harness is, and whether it may run with this one."""
    harness = (record or {}).get("harness")
    if not harness:
        # Hosts prepared by hand (fast/reference programs need no harness there).
        return "no harness set up by `ltm hosts setup`", True
    sha = str(harness.get("wheel_sha256"))[:12]
    text = f"harness {harness.get('version')} (wheel sha256 {sha})"
    if harness.get("digest") != digest:
        return (f"{text} DIFFERS from this machine's harness {__version__}; run `ltm hosts "
                "setup` to update it"), False
    return f"{text}, same as this machine's", True
