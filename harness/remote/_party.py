"""One party on its own host: a remote working directory, uploads, the process.

The party runs as ``setsid -w sh -c 'echo $$ > party.pgid; exec semi2k-party.x ...'``
so that it leads its own process group whose id is written next to it: the
runner can then kill exactly that group (TERM, then KILL) over any SSH
connection, even a new one made after the first was lost. ``setsid -w`` keeps
the party's exit status as the SSH command's status.
"""

from __future__ import annotations

import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.engine import Completed
from harness.errors import InputError, LtmError, MpSpdzError
from harness.fileio import open_private, private_dir
from harness.remote._connect import ConnectOptions, connect, describe
from harness.remote._listen import RECEIVER_PID, Listening
from harness.remote._results import Abandoned
from harness.remote._shell import (
    BAD_WORKDIR,
    EXEC_TIMEOUT,
    NO_HARNESS,
    SessionDir,
    agent_command,
    exec_anyhow,
    exec_command,
    harness_check,
    killed_by,
    read_steps,
    shell_path,
    use_workdir,
    workdir_problem,
)
from harness.remote.hosts import Host

__all__ = ["ConnectionLost", "RemoteParty", "Upload"]

PGID_FILE = "party.pgid"
_POLL_SECONDS = 0.01
_CHUNK = 1 << 16
_NO_BINARY, _NO_SETSID = 3, 4


class ConnectionLost(LtmError):
    """The SSH connection to a host dropped while its party was running."""


@dataclass(frozen=True)
class Upload:
    remote: str  # relative to the remote working directory
    local: Path | None = None
    content: bytes | None = None
    mode: int = 0o644
    moved_from: str | None = None  # a file already on the host, renamed into place


def _kill_script(d: str, wait_for_pgid: bool) -> str:
    """Kill the party's group, its pgid read in directory ``d`` (a shell word)."""
    # Prints "killed" when the group still existed: that party did not end on its own.
    wait = (f'i=0; while [ ! -s {d}/{PGID_FILE} ] && [ $i -lt 50 ]; do sleep 0.1; '
            'i=$((i+1)); done; ') if wait_for_pgid else ""
    return (f'{wait}[ -s {d}/{PGID_FILE} ] || exit 0; g=$(cat {d}/{PGID_FILE}); '
            'kill -0 -- "-$g" 2>/dev/null || exit 0; echo killed; kill -TERM -- "-$g"; '
            'i=0; while kill -0 -- "-$g" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; '
            'i=$((i+1)); done; kill -KILL -- "-$g" 2>/dev/null; '
            'i=0; while kill -0 -- "-$g" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; '
            'i=$((i+1)); done; exit 0')


def _remove_script(d: str, started: bool) -> str:
    """Kill anything the party left in directory ``d`` (a shell word), then remove it."""
    # The subshell's exits end only the kill part; the removal always runs. A receiver
    # still waiting for the client host (whose send failed) goes too.
    return (f"({_kill_script(d, wait_for_pgid=started)}) >/dev/null; "
            f"[ -s {d}/{RECEIVER_PID} ] && kill $(cat {d}/{RECEIVER_PID}) 2>/dev/null; "
            f"rm -rf {d}")


class RemoteParty(Listening):
    """Party ``index`` on ``host``; every method is safe to call from one worker thread."""

    def __init__(self, index: int, host: Host, log_dir: Path,
                 binary: str = "semi2k-party.x", count_args: list[str] | None = None) -> None:
        self.index = index
        self.binary_name = binary
        self.count_args = count_args if count_args is not None else []
        self.host = host
        self.name = f"P{index}"
        self.log_dir = log_dir
        self.client: paramiko.SSHClient | None = None
        self.remote_dir: str | None = None
        self.started = False
        self.upload_s = 0.0
        self.free_bytes: int | None = None  # under the remote working directory
        self._receiver: paramiko.Channel | None = None
        self._receiver_out: paramiko.ChannelFile | None = None
        self._channel: paramiko.Channel | None = None
        self._began = 0.0
        self._lock = threading.Lock()  # remote_dir/started vs. a concurrent cleanup
        self._session: SessionDir | None = None  # what removes remote_dir as it ends

    @property
    def label(self) -> str:
        return describe(self.host)

    @property
    def binary(self) -> str:
        return f"{self.host.mp_spdz.rstrip('/')}/{self.binary_name}"

    # --- before the run ------------------------------------------------------------

    def open(self, known_hosts: Path, options: ConnectOptions,
             inventory_path: Path | None) -> None:
        self.client = connect(self.host, known_hosts, options=options,
                              inventory_path=inventory_path)

    def make_dir(self, harness_for: str | None = None) -> None:
        """Check the engine (and, if ``harness_for`` says why it is needed, the harness)
        is there, then create a fresh private working directory."""
        assert self.client is not None
        workdir = shell_path(self.host.workdir.rstrip("/") or "/")
        harness = f"{harness_check()}; " if harness_for else ""
        setup = (f"test -x {shell_path(self.binary)} || exit {_NO_BINARY}; "
                 f"command -v setsid >/dev/null 2>&1 || exit {_NO_SETSID}; {harness}"
                 f"{use_workdir(self.host.workdir)}")
        with self._lock:
            # The host stops the party and removes the directory (its key, its shares)
            # itself once this connection ends, however it ends: the runner killed
            # outright leaves nothing there either.
            session = SessionDir(self.client, setup, f"{workdir}/ltm-XXXXXXXXXX",
                                 "df -Pk . | awk 'NR==2 {print $4}'",
                                 _remove_script('"$d"', started=False))
            self._session = session
            rc, lines, err = session.status, session.lines, session.stderr
            if rc == 0 and len(lines) >= 2:
                self.remote_dir = lines[-2]
                self.free_bytes = int(lines[-1]) * 1024 if lines[-1].isdigit() else None
                return
        if rc == _NO_BINARY:
            raise MpSpdzError(
                f"{self.label}: MP-SPDZ's {self.binary} is missing or not executable on that "
                "host; run `ltm mpspdz install` there, or fix 'mp_spdz' for this party in "
                "the inventory")
        if rc == _NO_SETSID:
            raise LtmError(f"{self.label}: the setsid command is missing on that host; "
                           "install util-linux there")
        if rc == NO_HARNESS:
            raise self._no_harness(harness_for or "")
        if rc == BAD_WORKDIR:
            raise InputError(workdir_problem(self.host, err))
        raise LtmError(f"{self.label}: cannot create a working directory under "
                       f"{self.host.workdir}: {err.strip() or f'status {rc}'}; fix 'workdir' "
                       "for this party in the inventory")

    def check_space(self, need: int) -> None:
        """Refuse, before anything is uploaded, a host whose disk cannot hold its files."""
        if self.free_bytes is not None and self.free_bytes < need:
            raise InputError(f"{self.label}: only {self.free_bytes / 2**20:.1f} MiB free under "
                             f"{self.host.workdir}, and its shares and inputs need "
                             f"{need / 2**20:.1f} MiB; free some space there or set 'workdir' "
                             "for this party to a larger disk")

    def upload(self, directories: list[str], uploads: list[Upload],
               abandon: threading.Event) -> None:
        """Create ``directories`` (parents first) and write ``uploads``; time it all."""
        assert self.client is not None and self.remote_dir is not None
        started = time.perf_counter()

        def check(_done: int, _total: int) -> None:
            if abandon.is_set():
                raise Abandoned

        # Directories and private files are made under umask 077 before any byte is sent:
        # SFTP would create files with the server's umask and chmod only afterwards.
        private = [shlex.quote(u.remote) for u in uploads
                   if u.mode & 0o077 == 0 and u.moved_from is None]
        moves = [u for u in uploads if u.moved_from is not None]
        script = (f"cd {shlex.quote(self.remote_dir)} && umask 077 && mkdir -p "
                  f"{' '.join(shlex.quote(d) for d in directories)}"
                  + "".join(f" && : > {name}" for name in private)
                  + "".join(f" && mv -f {shlex.quote(u.moved_from or '')} "
                            f"{shlex.quote(u.remote)}" for u in moves))
        uploads = [u for u in uploads if u.moved_from is None]
        rc, _, err = exec_command(self.client, script)
        if rc != 0:
            raise LtmError(f"{self.label}: cannot create its files in {self.remote_dir}: "
                           f"{err.strip() or f'status {rc}'}")
        sftp = self.client.open_sftp()
        sftp.get_channel().settimeout(EXEC_TIMEOUT)  # a stalled host fails, not hangs
        try:
            for item in uploads:
                check(0, 0)
                target = f"{self.remote_dir}/{item.remote}"
                if item.local is not None:
                    sftp.put(str(item.local), target, callback=check)
                else:
                    with sftp.open(target, "wb") as f:
                        f.set_pipelined(True)
                        f.write(item.content or b"")
                sftp.chmod(target, item.mode)
        finally:
            sftp.close()
        self.upload_s = time.perf_counter() - started

    def agent_step(self, args: list[str], why: str, timeout: float) -> dict:
        """Run the host agent's step ``args[0]`` in the working directory and return its
        reply (``why`` the step needs the harness, for the message when it is missing)."""
        assert self.client is not None and self.remote_dir is not None
        command = (f"cd {shlex.quote(self.remote_dir)} && {harness_check()} && "
                   f"exec {agent_command(*args)}")
        rc, out, err = exec_command(self.client, command, timeout)
        if rc == NO_HARNESS:
            raise self._no_harness(why)
        try:
            reply = read_steps(out).get(args[0])
        except ValueError:
            reply = None
        step = f"{self.label}: its agent's {args[0]} step"
        signal_name = killed_by(rc)
        if signal_name is not None:  # named: the shell's "Killed" line quotes its wrapper
            raise LtmError(f"{step} was killed by {signal_name} there (status {rc})")
        if rc < 0:
            raise LtmError(f"{step} ended with no exit status (killed there, or the "
                           "connection was lost)")
        if rc != 0 or reply is None:
            tail = " | ".join(err.strip().splitlines()[-3:]) or f"status {rc}"
            raise LtmError(f"{step} failed: {tail}")
        return reply

    def make_gate(self, name: str) -> None:
        """The FIFO ``name`` (0600) where the party's public input belongs: started
        before its stream, the party waits there until its server feeds it."""
        assert self.client is not None and self.remote_dir is not None
        rc, _, err = exec_command(self.client, f"cd {shlex.quote(self.remote_dir)} && "
                                  f"rm -f {shlex.quote(name)} && mkfifo -m 600 "
                                  f"{shlex.quote(name)}")
        if rc != 0:
            raise LtmError(f"{self.label}: cannot make its party's public input a FIFO in "
                           f"{self.remote_dir}: {err.strip() or f'status {rc}'}")

    # --- the run -------------------------------------------------------------------

    def mpc_args(self, program: str) -> list[str]:
        """The party's command line after its binary: its number, the count, the ip file."""
        return ["-p", str(self.index), *self.count_args, "-ip", "ip", program]

    def start(self, args: list[str]) -> None:
        assert self.client is not None and self.remote_dir is not None
        # An MP-SPDZ built elsewhere finds its libSPDZ.so by an absolute RUNPATH of
        # the machine it was built on; `ltm hosts setup` puts it beside the binary.
        mp_dir = shell_path(self.host.mp_spdz.rstrip("/"))
        command = (f"umask 077 && cd {shlex.quote(self.remote_dir)} && "
                   f"export LD_LIBRARY_PATH={mp_dir}"
                   "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} && exec setsid -w /bin/sh -c "
                   f"'echo $$ > {PGID_FILE} && exec \"$0\" \"$@\"' {shell_path(self.binary)} "
                   f"{shlex.join(args)} </dev/null")
        transport = self.client.get_transport()
        assert transport is not None
        with self._lock:
            channel = transport.open_session(timeout=EXEC_TIMEOUT)
            self.started = True  # from here on, cleanup must look for a process group
            self._channel = channel
            self._began = time.monotonic()
            channel.exec_command(command)

    def collect(self, abandon: threading.Event) -> Completed:
        """Stream the party's output into its log files until it ends."""
        channel = self._channel
        assert channel is not None
        if not self.log_dir.is_dir():
            private_dir(self.log_dir)
        out_path = self.log_dir / f"{self.name}.stdout"
        err_path = self.log_dir / f"{self.name}.stderr"
        with open_private(out_path) as out, open_private(err_path) as err:
            while True:
                busy = _drain(channel, out, err)
                if channel.closed or (channel.exit_status_ready() and channel.eof_received):
                    _drain(channel, out, err)
                    break
                if abandon.is_set():
                    raise Abandoned
                if not busy:
                    time.sleep(_POLL_SECONDS)
        wall = time.monotonic() - self._began
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        # paramiko marks a channel that closed with its connection as "exited" with -1.
        transport = channel.get_transport()
        if channel.exit_status < 0 and (transport is None or not transport.is_active()):
            raise ConnectionLost(f"{self.label}: the SSH connection was lost while its party "
                                 "ran")
        return Completed(self.name, channel.exit_status, stdout, stderr, wall)

    # --- cleanup -------------------------------------------------------------------

    def kill(self, options: ConnectOptions, known_hosts: Path) -> bool:
        """Stop the party's process group; True if it was still running."""
        with self._lock:
            directory, started = self.remote_dir, self.started
        if directory is None or not started:
            return False
        rc, out, _ = self._exec_anyhow(_kill_script(shlex.quote(directory), True),
                                       options, known_hosts)
        return rc == 0 and "killed" in out

    def remove(self, options: ConnectOptions, known_hosts: Path) -> None:
        """Kill anything left, then delete the remote working directory."""
        with self._lock:
            directory, started = self.remote_dir, self.started
        if directory is None:
            return
        # Ours first: a party just started has its group read (waited for) and killed
        # before the directory goes. The session's own end, which cannot wait (it runs
        # when the runner dies too), would remove the pgid file of a party still
        # starting, leaving it running where no one could find its group.
        try:
            rc, _, err = self._exec_anyhow(_remove_script(shlex.quote(directory), started),
                                           options, known_hosts)
        finally:
            if self._session is not None:
                self._session.release()  # and the host removes whatever is left
        if rc != 0:
            raise LtmError(f"{self.label}: could not remove {directory}: {err.strip()}")
        with self._lock:
            self.remote_dir = None

    def _exec_anyhow(self, script: str, options: ConnectOptions,
                     known_hosts: Path) -> tuple[int, str, str]:
        """Run a cleanup script, reconnecting if the first connection died."""
        return exec_anyhow(self.client, self.host, known_hosts, options, script)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _drain(channel: paramiko.Channel, out, err) -> bool:
    busy = False
    while channel.recv_ready():
        out.write(channel.recv(_CHUNK))
        busy = True
    while channel.recv_stderr_ready():
        err.write(channel.recv_stderr(_CHUNK))
        busy = True
    return busy
