"""``ltm hosts setup``: make every inventory host ready to run parties.

Each host gets, in its login user's home:

* the harness that runs on this machine, as a wheel built from it (so nothing
  needs to be published anywhere), installed into a virtualenv;
* MP-SPDZ, either this machine's own installation uploaded file by file
  (``local``: the compiler, the party binaries the harness uses and the
  MP-SPDZ libraries they link) or the official release the host downloads
  itself (``release``).

Building and installing the wheel is :mod:`.wheel`'s; MP-SPDZ's files and the
checks that a host can run them are :mod:`.bundle`'s.

A host is ready only once its record (:data:`RECORD`) is written, which
happens last and atomically; the record is removed before anything on the
host is changed, so a setup that fails half-way never leaves a host that
looks ready. Files whose checksum already matches are not uploaded again, and
a host whose record matches what would be installed is left alone, so a
second run changes nothing. Every host is set up in parallel and every
host's failure is collected into one :class:`HostGroupError`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from harness.engine import find_mpspdz
from harness.errors import InputError, LtmError
from harness.remote._connect import ConnectOptions, connect, describe
from harness.remote._results import HostGroupError, HostResult, labelled, parallel
from harness.remote._shell import RemoteShell, shell_path
from harness.remote._stop import Stop
from harness.remote._trust import SETUP_RECORD
from harness.remote.bundle import (
    LocalMpSpdz,
    check_binaries,
    install_release,
    local_cpu_flags,
    local_mpspdz,
    missing_cpu_flags,
    upload_mpspdz,
)
from harness.remote.hosts import REMOTE_VENV, Host, Inventory, check_distinct, load_inventory
from harness.remote.wheel import (
    HARNESS_HOME,
    HarnessBuild,
    build_harness,
    harness_digest,
    install_harness,
)

__all__ = ["MODES", "RECORD", "VENV", "HostSetup", "setup_hosts", "wait_for_marker"]

MODES = ("local", "release")
VENV = REMOTE_VENV
RECORD = SETUP_RECORD
_WHEELS = f"{HARNESS_HOME}/wheels"
# Room for a fresh venv with the harness's base dependencies, with a margin; the rest is
# uploads.
_VENV_BYTES = 600 * 2**20


# --- one host --------------------------------------------------------------------------

@dataclass
class HostSetup:
    """What setup did on one host (``changes`` empty: it was ready already)."""

    host: Host
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    record: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def line(self) -> str:
        what = "; ".join(self.changes) if self.changes else "unchanged (already set up)"
        return f"{describe(self.host)}: ready in {self.seconds:.1f} s: {what}"


@dataclass
class _Plan:
    mode: str
    build: Callable[[], HarnessBuild]  # builds the wheel on first call (thread-safe)
    digest: str
    mp: LocalMpSpdz | None
    cpu_flags: set[str]


def _probe_script(mp_dir: str, names: list[str]) -> str:
    q = shlex.quote
    record = shell_path(RECORD)
    sums = ""
    if names:
        # Only the files setup would upload: their checksums decide what to skip.
        sums = (f"if cd {shell_path(mp_dir)} 2>/dev/null; then "
                f"for f in {' '.join(q(n) for n in names)}; do "
                '[ -f "$f" ] && sha256sum -- "$f" | sed "s/^/sum /"; done; cd; fi; ')
    # /dev/null first: every "2>/dev/null" below fails where the login user cannot open it
    # (a /dev of mode 0700), which would look like a missing python3.
    return ('{ [ -r /dev/null ] && [ -w /dev/null ] && echo "devnull ok"; }; '
            'echo "home $HOME"; echo "arch $(uname -m)"; '
            "echo \"py $(python3 -c 'import sys, venv, ensurepip; "
            "print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null)\"; "
            'mkdir -p "$HOME" && echo "free $(df -Pk "$HOME" | awk \'NR==2 {print $4}\')"; '
            'echo "flags $(grep -m1 ^flags /proc/cpuinfo | cut -d: -f2)"; '
            f'[ -s {record} ] && echo "record $(tr -d \'\\n\' < {record})"; '
            f'[ -x {shell_path(VENV)}/bin/ltm ] && echo "venv ok"; '
            f"{sums}true")


def _parse_probe(out: str) -> dict:
    info: dict = {"sums": {}, "record": None}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "sum":
            digest, _, name = value.partition("  ")
            info["sums"][name] = digest
        elif key == "record":
            try:
                info["record"] = json.loads(value)
            except ValueError:
                info["record"] = None
        else:
            info[key] = value.strip()
    return info


def _setup_one(host: Host, known_hosts: Path, inventory_path: Path, plan: _Plan,
               options: ConnectOptions, stop: Stop) -> HostSetup:
    """Set up one host; ``plan.mode`` "client" installs the harness only.

    ``stop`` closes the connection, which ends the step running on the host (see
    :func:`harness.remote._shell.guarded`); every step can be repeated, so the next
    setup picks up where this one was stopped.
    """
    started = time.perf_counter()
    result = HostSetup(host)
    client = connect(host, known_hosts, options=options, inventory_path=inventory_path,
                     sleep=stop.sleep)
    with stop.closing(client):
        remote = RemoteShell(client, host)
        names = sorted(plan.mp.files) if plan.mp else []
        info = _parse_probe(remote.must(_probe_script(host.mp_spdz, names), "looking around"))
        remote.home = info.get("home", "")
        _check_host(host, info, plan)
        record = info["record"] or {}
        harness_ok = (info.get("venv") == "ok" and record.get("harness", {}).get("digest")
                      == plan.digest)
        uploads = ([n for n in names if info["sums"].get(n) != plan.mp.files[n]]
                   if plan.mp else [])
        mp_ok = _mp_recorded(record, plan) and not uploads
        if harness_ok and mp_ok:
            result.record = record
            result.seconds = time.perf_counter() - started
            return result
        # From here on the host changes: it must not look ready until the end.
        remote.must(f"rm -f {shell_path(RECORD)} && mkdir -p {shell_path(_WHEELS)}",
                    "removing the old record")
        harness = record.get("harness") if harness_ok else None
        if plan.mode == "client":
            mp_record: dict = {"source": "none", "binaries": []}
        elif plan.mode == "local":
            # MP-SPDZ before the harness: a host that cannot run the binaries fails in
            # seconds, before the long pip install.
            assert plan.mp is not None
            sent = upload_mpspdz(remote, plan.mp, uploads)
            check_binaries(remote, list(plan.mp.binaries))
            if uploads:
                result.changes.append(f"MP-SPDZ: {len(uploads)} file(s) uploaded "
                                      f"({sent / 1e6:.1f} MB), {len(names) - len(uploads)} "
                                      "already there")
            mp_record = {"source": "local", "version": plan.mp.version,
                         "binaries": list(plan.mp.binaries), "files": plan.mp.files}
        if harness is None:
            harness = install_harness(remote, plan.build())
            result.changes.insert(0, f"harness {harness['version']} installed "
                                     f"(wheel sha256 {harness['wheel_sha256'][:12]})")
        if plan.mode == "release":
            mp_record = install_release(remote, record)
            check_binaries(remote, mp_record["binaries"])
            result.changes.append(f"MP-SPDZ {mp_record.get('version') or ''} release "
                                  "installed by the host")
        if not result.changes:
            result.changes.append("setup record rewritten")
        record = {"harness": harness, "mp_spdz": {**mp_record, "path": host.mp_spdz},
                  "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        stop.check()  # a host stopped half-way must not be recorded as ready
        _write_record(remote, record)
        result.record = record
    result.seconds = time.perf_counter() - started
    return result


def _mp_recorded(record: dict, plan: _Plan) -> bool:
    mp = record.get("mp_spdz") or {}
    if plan.mode == "client":
        return "source" in mp
    if plan.mode == "release":
        return mp.get("source") == "release"
    assert plan.mp is not None
    return mp.get("source") == "local" and mp.get("files") == plan.mp.files


def _check_host(host: Host, info: dict, plan: _Plan) -> None:
    where = describe(host)
    if info.get("devnull") != "ok":
        raise InputError(f"{where}: the login user cannot open /dev/null there (is /dev not "
                         "searchable, e.g. mode 0700, or /dev/null not a 0666 character "
                         "device?); as root there: chmod 0755 /dev; chmod 0666 /dev/null")
    if info.get("arch") != os.uname().machine and plan.mode == "local":
        raise InputError(f"{where}: the host is {info.get('arch') or 'of unknown architecture'}"
                         f", this machine's MP-SPDZ is built for {os.uname().machine}; use "
                         "--mp-spdz release or a host of the same architecture")
    if not info.get("py"):
        raise InputError(f"{where}: python3 with venv is missing on the host; install it "
                         "there (Debian/Ubuntu: apt-get install python3-venv)")
    if tuple(int(x) for x in info["py"].split(".")) < (3, 10):
        raise InputError(f"{where}: the host's python3 is {info['py']}; the harness needs "
                         "3.10 or newer")
    need = _VENV_BYTES + (plan.mp.size if plan.mp else 0)
    free = int(info.get("free") or 0) * 1024
    if free < need:
        raise InputError(f"{where}: only {free / 2**20:.0f} MiB free in the login user's "
                         f"home, setup needs about {need / 2**20:.0f} MiB; free some space "
                         "or give the instance a larger disk")
    if plan.mode == "local":
        missing = missing_cpu_flags(plan.cpu_flags, info.get("flags", ""))
        if missing:
            raise InputError(f"{where}: the host's CPU lacks {', '.join(missing)}, which this "
                             "machine's MP-SPDZ may use (built with -march=native); use "
                             "--mp-spdz release, or build MP-SPDZ for the hosts' CPU")


def _write_record(remote: RemoteShell, record: dict) -> None:
    target = remote.path(RECORD)
    sftp = remote.client.open_sftp()
    try:
        tmp = f"{target}.tmp"
        with sftp.open(tmp, "w") as fh:
            fh.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        sftp.posix_rename(tmp, target)
    finally:
        sftp.close()


# --- all hosts -------------------------------------------------------------------------

def setup_hosts(inventory_path: str | os.PathLike[str], *, mode: str = "local",
                mp_spdz: str | os.PathLike[str] | None = None,
                echo: Callable[[str], None] = print,
                options: ConnectOptions | None = None) -> list[HostSetup]:
    """Set every host of the inventory up in parallel; one line per host as it finishes."""
    if mode not in MODES:
        raise InputError(f"unknown --mp-spdz {mode!r}; choose local or release")
    inventory_path = Path(inventory_path)
    inventory = load_inventory(inventory_path)
    hosts = _machines(inventory)
    mp = local_mpspdz(find_mpspdz(mp_spdz)) if mode == "local" else None
    if not inventory.known_hosts.is_file():
        # Checked here too so that the message comes once, not once per host.
        connect(hosts[0], inventory.known_hosts, inventory_path=inventory_path)
    build_lock = threading.Lock()
    built: list[HarnessBuild] = []
    scratch = Path(tempfile.mkdtemp(prefix="ltm-setup-"))

    def build() -> HarnessBuild:
        with build_lock:
            if not built:
                built.append(build_harness(scratch))
            return built[0]

    plan = _Plan(mode, build, harness_digest(), mp, local_cpu_flags())
    results = [HostResult(i, h) for i, h in enumerate(hosts)]
    done: list[HostSetup | None] = [None] * len(hosts)

    client_plan = dataclasses.replace(plan, mode="client", mp=None)

    stop = Stop()

    def one(i: int) -> None:
        try:
            setup = _setup_one(hosts[i], inventory.known_hosts, inventory_path,
                               client_plan if hosts[i] in inventory.clients else plan,
                               options or ConnectOptions(), stop)
            done[i] = setup
            echo(setup.line())
        except Exception as exc:
            if stop.stopped:
                return  # what a stop breaks is no failure of the host's
            results[i].error = exc
            echo(f"{describe(hosts[i])}: FAILED: "
                 f"{str(exc).removeprefix(describe(hosts[i]) + ': ')}")

    try:
        parallel(one, range(len(hosts)), "ltm-setup", stop=stop)
    except KeyboardInterrupt:
        echo(_interrupted(hosts, done, inventory_path))
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [r for r in results if r.error is not None]
    for r in failed:
        error = r.error
        if error is not None and not isinstance(error, (LtmError, OSError, EOFError,
                                                        paramiko.SSHException)):
            raise error  # a bug: keep its traceback
    if failed:
        ready = len(hosts) - len(failed)
        raise HostGroupError(
            "; ".join(_labelled(r) for r in failed)
            + f" ({ready} of {len(hosts)} host(s) ready; fix and rerun `ltm hosts setup`, "
              "which skips what is already there)", results)
    finished = [d for d in done if d is not None]
    changed = sum(d.changed for d in finished)
    if changed:
        echo(f"{len(finished)} host(s) ready; {changed} changed.")
    else:
        echo(f"{len(finished)} host(s) ready; nothing changed (all were already set up).")
    return finished


def _interrupted(hosts: list[Host], done: list[HostSetup | None], inventory_path: Path) -> str:
    """The one line that says, after a signal, which hosts are ready and which are not."""
    ready = [h.name for h, d in zip(hosts, done, strict=True) if d is not None]
    stopped = [h.name for h, d in zip(hosts, done, strict=True) if d is None]
    return (f"setup interrupted: {len(ready)} of {len(hosts)} host(s) ready"
            f"{' (' + ', '.join(ready) + ')' if ready else ''}"
            f"{'; stopped on ' + ', '.join(stopped) if stopped else ''}; run `ltm hosts setup "
            f"{inventory_path}` again to finish (it skips what is already there)")


def _labelled(result: HostResult) -> str:
    assert result.error is not None
    return labelled(describe(result.host), result.error)


def _machines(inventory: Inventory) -> list[Host]:
    """The parties' hosts plus the client hosts, each machine once."""
    check_distinct(inventory)
    return list(inventory.hosts) + list(inventory.clients)


def wait_for_marker(inventory_path: str | os.PathLike[str], marker: str, *,
                    timeout: float = 600.0, interval: float = 5.0,
                    options: ConnectOptions | None = None) -> None:
    """Wait until ``marker`` exists on every host (e.g. cloud-init's last step)."""
    inventory = load_inventory(inventory_path)
    hosts = _machines(inventory)
    deadline = time.monotonic() + timeout
    results = [HostResult(i, h) for i, h in enumerate(hosts)]

    stop = Stop()

    def one(i: int) -> None:
        try:
            client = connect(hosts[i], inventory.known_hosts, options=options or ConnectOptions(),
                             inventory_path=Path(inventory_path), sleep=stop.sleep)
            with stop.closing(client):
                remote = RemoteShell(client, hosts[i])
                while remote.run(f"test -f {shlex.quote(marker)}")[0] != 0:
                    if time.monotonic() > deadline:
                        raise LtmError(f"{describe(hosts[i])}: {marker} did not appear within "
                                       f"{timeout:g} s; see /var/log/cloud-init-output.log "
                                       "there")
                    stop.sleep(interval)
        except Exception as exc:
            if not stop.stopped:
                results[i].error = exc

    parallel(one, range(len(hosts)), "ltm-wait", stop=stop)
    failed = [r for r in results if r.error is not None]
    if failed:
        raise HostGroupError("; ".join(_labelled(r) for r in failed), results)
