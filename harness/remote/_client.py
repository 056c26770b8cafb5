"""The inventory's client machines (``[client]``, or several ``[[client]]``): where the
clients' shares are made.

Each client host runs client workers (the agent's ``stream`` step,
:mod:`harness.remote.streaming`) that stream every server its shares directly,
over the servers' ``mpc_host`` addresses, with TLS and per-run certificates
pinned on both sides. What comes back to the runner is what verification needs
(the encoded plaintext sketch of its clients), never a share.

With several client hosts each takes only its own contiguous range of clients:
that range's rows of data, read here from ``--data`` (or computed there from
the seed), so no client host needs the data file or sees another range's rows.
All client hosts of a run present one per-run certificate: they are one side,
the clients', to the servers.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from harness.clients import Rows
from harness.errors import InputError, LtmError
from harness.remote._connect import ConnectOptions, connect, describe
from harness.remote._shell import (
    BAD_WORKDIR,
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
from harness.remote.agent import LOST
from harness.remote.hosts import Host
from harness.remote.streaming import decode_totals
from harness.stream import ProducerTotals, StreamSpec, write_rows

if TYPE_CHECKING:
    pass

__all__ = ["ClientHost", "StreamCut"]

class StreamCut(LtmError):
    """A client host's step ended because a server closed its streams: the consequence
    of a failure elsewhere (another host's), never named before it."""


class ClientHost:
    def __init__(self, host: Host, known_hosts: Path, inventory_path: Path | None,
                 options: ConnectOptions, certificate: tuple[Path, Path],
                 *, several: bool = False) -> None:
        self.host, self.known_hosts, self.inventory_path = host, known_hosts, inventory_path
        self.options = options
        self.several = several  # one of several client hosts: named apart in messages
        self.client: paramiko.SSHClient | None = None
        self.session_dir: SessionDir | None = None
        self.remote_dir: str | None = None
        self.key, self.cert = certificate
        self.cores = 1  # what the host's client workers may use, known once connected

    @property
    def label(self) -> str:
        return f"the client host {describe(self.host)}"

    @property
    def section(self) -> str:
        return f"[[client]] {self.host.name!r}" if self.several else "[client]"

    def _open(self) -> paramiko.SSHClient:
        if self.client is None:
            self.client = connect(self.host, self.known_hosts, options=self.options,
                                  inventory_path=self.inventory_path)
            workdir = shell_path(self.host.workdir.rstrip("/") or "/")
            # Removed by the host itself once this connection ends, however it ends: the
            # private key and the clients' rows put there never outlive the run.
            self.session_dir = SessionDir(self.client,
                                          f"{harness_check()}; {use_workdir(self.host.workdir)}",
                                          f"{workdir}/ltm-client-XXXXXXXXXX", "nproc || echo 1")
            rc, lines, err = (self.session_dir.status, self.session_dir.lines,
                              self.session_dir.stderr)
            if rc == NO_HARNESS:
                raise LtmError(f"{self.label}: the harness is not installed there; run `ltm "
                               "hosts setup` first")
            if rc == BAD_WORKDIR:
                raise InputError(workdir_problem(self.host, err).replace(
                    describe(self.host), self.label, 1).replace("this party", self.section))
            if rc != 0 or len(lines) < 2:
                raise LtmError(f"{self.label}: cannot create a working directory under "
                               f"{self.host.workdir}: {err.strip() or f'status {rc}'}")
            self.remote_dir = lines[-2]
            self.cores = max(1, int(lines[-1])) if lines[-1].strip().isdigit() else 1
        return self.client

    def _put(self, files: dict[str, bytes]) -> None:
        client = self._open()
        # Created empty under umask 077 first: SFTP would create them with the server's
        # umask, and the clients' data must never be readable by others, not even briefly.
        touch = " && ".join(f": > {shlex.quote(name)}" for name in files)
        rc, _, err = exec_command(client, f"cd {shlex.quote(self.remote_dir or '.')} && "
                                          f"umask 077 && {touch}")
        if rc != 0:
            raise LtmError(f"{self.label}: cannot write in {self.remote_dir}: "
                           f"{err.strip() or f'status {rc}'}")
        sftp = client.open_sftp()
        try:
            for name, content in files.items():
                with sftp.open(f"{self.remote_dir}/{name}", "wb") as fh:
                    fh.set_pipelined(True)
                    fh.write(content)
        finally:
            sftp.close()

    def _agent(self, step: str, *args: str, timeout: float) -> dict:
        """Run one host agent step in the remote directory; its reply."""
        assert self.client is not None and self.remote_dir is not None
        rc, out, err = exec_command(self.client, f"cd {shlex.quote(self.remote_dir)} && "
                                                 f"{agent_command(step, *args)}",
                                    timeout=timeout)
        try:
            reply = read_steps(out).get(step)
        except ValueError as exc:
            reply, err = None, f"{err}\n{exc}"
        signal_name = killed_by(rc)
        if signal_name is not None:
            raise LtmError(f"{self.label}: `agent {step}` was killed by {signal_name} there "
                           f"(status {rc})")
        transport = self.client.get_transport()
        if rc < 0 and (transport is None or not transport.is_active()):
            raise LtmError(f"{self.label}: the SSH connection was lost while `agent {step}` "
                           "ran (the host removes its working directory as its session ends)")
        if rc == LOST:
            tail = " | ".join(err.strip().splitlines()[-1:])
            raise StreamCut(f"{self.label}: `agent {step}` lost its streams: {tail}")
        if rc != 0 or reply is None:
            tail = " | ".join(err.strip().splitlines()[-3:])
            raise LtmError(f"{self.label}: `agent {step}` failed (status {rc}): "
                           f"{tail or 'no output'}")
        return reply

    def workers(self) -> int:
        """How many client workers this host runs in a streamed run: one per core."""
        self._open()
        return self.cores

    def stream(self, spec: StreamSpec, rows: Rows | None, host: int,
               servers: list[tuple[Host, int, Path]], timeout: float) -> list[ProducerTotals]:
        """Client host ``host``'s part of a streamed run: its workers stream their
        clients' shares to every server ((host, port, certificate) in party order) as
        they make them. ``rows`` is None for synthetic rows (the seed travels in
        ``spec``), else this host's range of them is shipped first, a chunk at a time.
        Each worker's totals come back; no share does."""
        self._open()
        files = {"client.pem": self.cert.read_bytes(), "client.key": self.key.read_bytes(),
                 "stream.json": spec.to_json().encode()}
        targets = []
        for party, (server, port, cert) in enumerate(servers):
            files[f"server-P{party}.pem"] = cert.read_bytes()
            targets.append({"host": server.mpc_host, "port": port,
                            "peer": f"server-P{party}.pem"})
        files["targets.json"] = json.dumps(targets).encode()
        self._put(files)
        if rows is not None:
            self._put_rows(rows, *spec.plan.host_span(host))
        reply = self._agent("stream", "stream.json", "targets.json", str(host), "client.pem",
                            "client.key", "--timeout", str(timeout), timeout=timeout + 60)
        return [decode_totals(raw) for raw in reply["workers"]]

    def _put_rows(self, rows: Rows, start: int, stop: int) -> None:
        """This host's rows as ``rows.npy``, written through SFTP a chunk at a time into
        a file created private first."""
        self._put({"rows.npy": b""})
        assert self.client is not None
        sftp = self.client.open_sftp()
        try:
            with sftp.open(f"{self.remote_dir}/rows.npy", "wb") as fh:
                fh.set_pipelined(True)
                write_rows(rows, start, stop, fh)
        finally:
            sftp.close()

    def remove(self) -> None:
        """Remove the working directory: the host does as its session ends, and this
        makes sure, over a new connection if this one died."""
        if self.client is None:
            return
        try:
            if self.session_dir is not None:
                self.session_dir.release()
            if self.remote_dir is not None:
                rc, _, err = exec_anyhow(self.client, self.host, self.known_hosts,
                                         self.options, f"rm -rf {shlex.quote(self.remote_dir)}")
                if rc != 0:
                    raise LtmError(f"{self.label}: could not remove {self.remote_dir}: "
                                   f"{err.strip() or f'status {rc}'}")
                self.remote_dir = None
        finally:
            self.session_dir = None
            self.client.close()
            self.client = None

