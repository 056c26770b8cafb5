"""Commands on a host's shell: quoting, running them, and reading the host agent's reply.

Every remote command is built here from argument lists, so that a path from
the inventory (``~/...`` included) is quoted the same way everywhere. What a
host runs of the harness is one program, :mod:`harness.remote.agent`; each of
its steps answers with one JSON object line on stdout, which :func:`read_steps`
reads back.
"""

from __future__ import annotations

import json
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path

import paramiko

from harness.errors import LtmError
from harness.remote._connect import ConnectOptions, connect, describe
from harness.remote.hosts import REMOTE_PYTHON, Host

__all__ = ["BAD_WORKDIR", "EXEC_TIMEOUT", "NO_HARNESS", "RemoteShell", "SessionDir",
           "agent_command", "exec_anyhow", "exec_command", "guarded", "harness_check",
           "killed_by", "put_atomic", "read_steps", "shell_join", "shell_path", "use_workdir",
           "workdir_problem"]

EXEC_TIMEOUT = 60.0
# The exit status of a command that found no harness on the host (harness_check).
NO_HARNESS = 5
# ... and of one whose working directory is not private to the login user (use_workdir).
BAD_WORKDIR = 6
AGENT_MODULE = "harness.remote.agent"


def shell_path(path: str) -> str:
    """``path`` quoted for the remote shell, with a leading ``~`` still expanded."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def shell_join(argv: Sequence[str]) -> str:
    """A command line for the remote shell; each word quoted by :func:`shell_path`."""
    return " ".join(shell_path(word) for word in argv)


def killed_by(status: int) -> str | None:
    """The signal's name if a remote command's exit ``status`` says one killed it (the
    shell's 128 + its number), else None: the shell's own "Killed" line would quote the
    whole command that ran (:func:`guarded`'s wrapper) and say less."""
    if status > 128:
        try:
            return signal.Signals(status - 128).name
        except ValueError:
            return None
    return None


def agent_command(*args: str) -> str:
    """The host agent's command line (the harness's venv python, as setup installed it)."""
    return shell_join([REMOTE_PYTHON, "-m", AGENT_MODULE, *args])


def harness_check() -> str:
    """Shell that exits with :data:`NO_HARNESS` unless the harness is installed."""
    return f"{{ [ -x {shell_path(REMOTE_PYTHON)} ] || exit {NO_HARNESS}; }}"


def use_workdir(workdir: str) -> str:
    """Shell that creates ``workdir`` (0700) if need be and exits with :data:`BAD_WORKDIR`,
    printing ``workdir UID MODE ME`` on stderr, unless the login user owns it and nobody
    else may enter it; then leaves umask 077 set."""
    w = shell_path(workdir.rstrip("/") or "/")
    return (f"umask 077; mkdir -p {w} 2>/dev/null; "
            f"if [ -d {w} ]; then set -- $(stat -L -c '%u %a' {w}); "
            'else set -- none none; fi; '
            'case "$1:$2" in "$(id -u)":*00) ;; '
            f'*) echo "workdir $1 $2 $(id -u)" >&2; exit {BAD_WORKDIR};; esac')


def workdir_problem(host: Host, err: str) -> str:
    """Why a host's ``workdir`` was refused (from :func:`use_workdir`'s line), and the fix."""
    where, path = describe(host), host.workdir
    fields = next((line.split() for line in err.splitlines() if line.startswith("workdir ")),
                  [])
    owner, mode, me = (fields[1:4] + ["?"] * 3)[:3]
    if owner == "none":
        return (f"{where}: workdir {path} cannot be created there (is something in the way, "
                "or is its parent not writable?); choose another 'workdir' for this party in "
                "the inventory, or remove it to use the default")
    if owner != me:
        return (f"{where}: workdir {path} is owned by uid {owner}, not you (uid {me}): "
                "choose another 'workdir' for this party in the inventory (or remove it to "
                "use the default, private to each user), or remove that directory there")
    return (f"{where}: workdir {path} has mode {mode.zfill(4)}, open to other users; run "
            f"`chmod 700 {path}` there, or choose another 'workdir' for this party in the "
            "inventory")


def read_steps(out: str) -> dict[str, dict]:
    """The host agent's replies, by step name: one JSON object per stdout line.

    Raises ValueError for any other line (the caller names the host).
    """
    steps: dict[str, dict] = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not isinstance(reply.get("step"), str):
            raise ValueError(f"unexpected output from the host agent: {line[:200]!r}")
        steps[reply["step"]] = reply
    return steps


def guarded(script: str) -> str:
    """``script``, ended with everything it started once its SSH channel closes.

    sshd does not signal a command whose connection is gone (there is no
    terminal to hang up), so a long step (pip install, an MP-SPDZ download)
    would go on after the runner was interrupted or lost the host. The script
    runs in a process group of its own (``setsid``) while the shell watches the
    channel's stdin, which nothing ever writes to: it reaches its end only when
    the channel closes, and the watcher then kills the group (TERM, and KILL a
    second later). A script that ends by itself takes the watcher with it. A
    host without ``setsid`` runs the script as before.
    """
    q = shlex.quote(script)
    # An asynchronous list's stdin is /dev/null in a non-interactive shell: the watcher
    # reads the channel through fd 3. `kill -SIG -PGID` is what dash and bash both accept.
    # The login shell ($SHELL, which sshd sets) runs the script, as sshd itself would.
    return ('command -v setsid >/dev/null 2>&1 || exec "${SHELL:-/bin/sh}" -c ' + q + "; "
            'exec 3<&0; setsid "${SHELL:-/bin/sh}" -c ' + q + " </dev/null 3<&- & p=$!; "
            "{ while read -r _ <&3; do :; done; kill -TERM -$p; sleep 1; kill -KILL -$p; } "
            ">/dev/null 2>&1 & w=$!; exec 3<&-; "
            'wait "$p"; s=$?; kill "$w" 2>/dev/null; exit "$s"')


def exec_command(client: paramiko.SSHClient, command: str,
                 timeout: float = EXEC_TIMEOUT) -> tuple[int, str, str]:
    """Run ``command`` on the host (:func:`guarded`); its exit status, stdout and stderr.

    Closing ``client`` from another thread (:class:`harness.remote._stop.Stop`) ends
    the wait here at once, and the command on the host with it.
    """
    _, stdout, stderr = client.exec_command(guarded(command), timeout=timeout)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err


def exec_anyhow(client: paramiko.SSHClient | None, host: Host, known_hosts: Path,
                options: ConnectOptions, script: str) -> tuple[int, str, str]:
    """:func:`exec_command` for cleanup: over ``client``, or, if its connection died (or
    there is none), over a new one to ``host`` (retried as any connection is)."""
    transport = client.get_transport() if client is not None else None
    if client is not None and transport is not None and transport.is_active():
        try:
            return exec_command(client, script)
        except (OSError, EOFError, paramiko.SSHException):
            pass
    fresh = connect(host, known_hosts, options=ConnectOptions(
        timeout=options.timeout, attempts=2, backoff=options.backoff))
    try:
        return exec_command(fresh, script)
    finally:
        fresh.close()


_READY = "ltm-session-dir-ready"


class SessionDir:
    """A fresh private working directory on a host that lasts no longer than the SSH
    session that made it.

    The shell that creates it stays, reading its channel, which nothing writes to:
    when the channel closes (:meth:`release`, the runner's end or death, the dropped
    connection, a killed sshd), its read ends and it removes the directory, so the
    secrets in it (a client host's private key, its clients' rows) never outlive the
    run on the host, even when the runner cannot come back to remove them.
    """

    def __init__(self, client: paramiko.SSHClient, setup: str, pattern: str,
                 report: str = "true", end: str = 'rm -rf "$d"') -> None:
        """Run ``setup`` (which may exit with a status of its own), create ``pattern``
        (``mktemp -d``'s, quoted), enter it, print its path and what ``report`` prints;
        when the session ends, run ``end`` from ``/`` (the directory is ``"$d"``)."""
        transport = client.get_transport()
        if transport is None:
            raise paramiko.SSHException("the SSH connection is closed")
        self.channel = transport.open_session(timeout=EXEC_TIMEOUT)
        self.channel.settimeout(EXEC_TIMEOUT)
        self.channel.exec_command(
            f'{setup}; d=$(mktemp -d {pattern}) && cd "$d" && pwd -P && {{ {report}; }} '
            f"|| exit 1; trap {shlex.quote(f'cd /; {end}; exit 1')} HUP INT TERM; "
            f"echo {_READY}; while read -r _; do :; done; cd /; {end}")
        out = self.channel.makefile("r")
        self.lines: list[str] = []
        for line in out:
            if line.strip() == _READY:
                break
            self.lines.append(line.rstrip("\n"))
        else:  # the setup or mktemp failed: the shell ended
            self.status = self.channel.recv_exit_status()
            self.stderr = self.channel.makefile_stderr("r").read().decode(errors="replace")
            self.channel.close()
            return
        self.status, self.stderr = 0, ""

    def release(self) -> None:
        """Close the channel: the host removes the directory now (waits a moment for it)."""
        try:
            self.channel.shutdown_write()
            self.channel.status_event.wait(EXEC_TIMEOUT)
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the connection is gone: the host removed it when it noticed
        finally:
            self.channel.close()


def put_atomic(sftp: paramiko.SFTPClient, local: Path, target: str, mode: int) -> None:
    """Upload ``local`` to ``target`` so that no reader ever sees it half-written."""
    tmp = f"{target}.ltm-upload"
    sftp.put(str(local), tmp)
    sftp.chmod(tmp, mode)
    sftp.posix_rename(tmp, target)


class RemoteShell:
    """One host's SSH connection and the few shell steps setup needs."""

    def __init__(self, client: paramiko.SSHClient, host: Host) -> None:
        self.client, self.host = client, host
        self.label = describe(host)
        self.home = ""  # the login user's, once known (see path)

    def run(self, script: str, timeout: float = EXEC_TIMEOUT) -> tuple[int, str, str]:
        return exec_command(self.client, script, timeout)

    def must(self, script: str, what: str, timeout: float = EXEC_TIMEOUT) -> str:
        rc, out, err = self.run(script, timeout)
        if rc != 0:
            tail = " | ".join((err or out).strip().splitlines()[-3:])
            raise LtmError(f"{self.label}: {what} failed (status {rc}): {tail or 'no output'}")
        return out

    def path(self, path: str) -> str:
        """An absolute remote path (SFTP does not expand ``~``)."""
        if path == "~" or path.startswith("~/"):
            return self.home + path[1:]
        return path
