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
from collections.abc import Sequence
from pathlib import Path

import paramiko

from harness.errors import LtmError
from harness.remote._connect import describe
from harness.remote.hosts import REMOTE_PYTHON, Host

__all__ = ["EXEC_TIMEOUT", "NO_HARNESS", "RemoteShell", "agent_command", "exec_command",
           "harness_check", "put_atomic", "read_steps", "shell_join", "shell_path"]

EXEC_TIMEOUT = 60.0
# The exit status of a command that found no harness on the host (harness_check).
NO_HARNESS = 5
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


def agent_command(*args: str) -> str:
    """The host agent's command line (the harness's venv python, as setup installed it)."""
    return shell_join([REMOTE_PYTHON, "-m", AGENT_MODULE, *args])


def harness_check() -> str:
    """Shell that exits with :data:`NO_HARNESS` unless the harness is installed."""
    return f"{{ [ -x {shell_path(REMOTE_PYTHON)} ] || exit {NO_HARNESS}; }}"


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


def exec_command(client: paramiko.SSHClient, command: str,
                 timeout: float = EXEC_TIMEOUT) -> tuple[int, str, str]:
    """Run ``command`` on the host; its exit status, stdout and stderr."""
    _, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err


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
