"""A server's agent steps that listen for the clients: their start, end and failure.

A server that takes its stream of shares (``serve``) runs that agent step in
the background over its SSH connection: the step binds its port and says so
(``{"step": "listening"}``) before the clients start, and its reply (or failure)
is read once they are done.
The receiver's pid is written beside it, so that cleanup can stop it from any
connection. :class:`Listening` is mixed into
:class:`~harness.remote._party.RemoteParty`, whose connection and working
directory it uses.
"""

from __future__ import annotations

import shlex
import signal

import paramiko

from harness.errors import LtmError
from harness.remote._shell import (
    EXEC_TIMEOUT,
    NO_HARNESS,
    agent_command,
    harness_check,
    read_steps,
)
from harness.remote.agent import LOST
from harness.remote.hosts import Host

__all__ = ["RECEIVER_PID", "Listening"]

RECEIVER_PID = "receiver.pid"
_SIGNALS = {int(s): s.name for s in signal.Signals}


class Listening:
    """The listening agent steps of party ``index`` (see the module's docstring)."""

    index: int
    host: Host
    client: paramiko.SSHClient | None
    remote_dir: str | None
    _receiver: paramiko.Channel | None
    _receiver_out: paramiko.ChannelFile | None

    @property
    def label(self) -> str:
        raise NotImplementedError

    def _no_harness(self, why: str) -> LtmError:
        return LtmError(f"{self.label}: the harness is not installed on that host, and {why}; "
                        "run `ltm hosts setup` first")

    def start_serve(self, args: list[str], port: int, timeout: float, why: str) -> None:
        """A streamed run: the agent's ``serve`` takes this server's stream on ``port``."""
        self._listen(["serve", *args], port, timeout, why)

    def _listen(self, args: list[str], port: int, timeout: float, why: str) -> None:
        """Start an agent step that listens on ``port``; return once it says it does."""
        assert self.client is not None and self.remote_dir is not None
        command = (f"cd {shlex.quote(self.remote_dir)} && echo $$ > {RECEIVER_PID} && "
                   f"{harness_check()} && exec {agent_command(*args)}")
        transport = self.client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=EXEC_TIMEOUT)
        channel.settimeout(timeout)
        channel.exec_command(command)
        self._receiver = channel
        # One file object for every read: a second one would miss what this one buffered.
        self._receiver_out = channel.makefile("r")
        line = _text(self._receiver_out.readline())
        try:
            listening = "listening" in read_steps(line)
        except ValueError:
            listening = False
        if not listening:
            if channel.recv_exit_status() == NO_HARNESS:
                raise self._no_harness(why)
            raise LtmError(f"{self.label}: cannot take the clients' shares on port {port}: "
                           f"{self._receiver_error()}")

    def finish_serve(self) -> dict:
        """The ``serve`` step's figures, once this server's stream has ended."""
        return self._finish("serve", "taking its stream of shares")["serve"]

    def serve_failure(self) -> tuple[str, bool] | None:
        """Why the listening step failed, if it already has (without waiting), and
        whether only because it lost a client's stream (a consequence, not a cause)."""
        channel = self._receiver
        if channel is None or not channel.exit_status_ready():
            return None
        rc = channel.recv_exit_status()
        if rc == 0:
            return None
        if rc < 0:  # sshd reports a signal, not a status, for the process it ran
            return f"{self.label}: its `agent serve` was killed there (no exit status)", False
        if rc > 128 and rc - 128 in _SIGNALS:
            return (f"{self.label}: its `agent serve` was killed by {_SIGNALS[rc - 128]} "
                    f"there (status {rc})", False)
        return f"{self.label}: {self._receiver_error()}", rc == LOST

    def _finish(self, step: str, what: str) -> dict[str, dict]:
        channel, out_file = self._receiver, self._receiver_out
        assert channel is not None and out_file is not None
        out = _text(out_file.read())
        try:
            replies = read_steps(out)
        except ValueError:
            replies = {}
        if channel.recv_exit_status() != 0 or step not in replies:
            raise LtmError(f"{self.label}: {what} failed: {self._receiver_error()}")
        return replies

    def _receiver_error(self) -> str:
        assert self._receiver is not None
        err = _text(self._receiver.makefile_stderr("r").read())
        return " | ".join(err.strip().splitlines()[-3:]) or "no output"


def _text(data: str | bytes) -> str:
    # paramiko's read() gives bytes whatever the mode; readline() gives str.
    return data.decode(errors="replace") if isinstance(data, bytes) else data
