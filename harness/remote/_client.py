"""The inventory's client machines (``[client]``, or several ``[[client]]``): where the
clients' shares are prepared.

The runner uploads the clients' data (the matrix, the public sketch and the
noise parameters) to the client host, whose host agent prepares every
server's share file there, or with seeded sharing its seeds and full words per
component (:func:`harness.remote.transfer.prepare`), and later sends each
server only its own files, directly, over the servers' ``mpc_host``
addresses, with TLS and per-run certificates pinned on both sides. What comes
back to the runner is what verification needs (the encoded plaintext sketch)
and the names and sizes of each server's files, never a share.

With several client hosts each is given only its own contiguous range of
clients (:mod:`harness.clients.ranges`): that range's rows of data, read here
from ``--data`` or the synthetic generator, and its columns of the sketch, so
no client host needs the data file or sees another range's rows. Its
plaintext sketch comes back alone; the runner verifies against their sum. All
client hosts of a run present one per-run certificate: they are one side, the
clients', to the servers.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import shlex
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import paramiko

from harness.clients import Prepared, ProducerTotals, Rows, StreamSpec, range_sketch, write_rows
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
    read_steps,
    shell_path,
    use_workdir,
    workdir_problem,
)
from harness.remote.agent import LOST
from harness.remote.hosts import Host
from harness.remote.streaming import decode_totals

if TYPE_CHECKING:
    from harness.engine import ClientJob

__all__ = ["ClientHost", "StreamCut", "combine_parts"]

_SIGNALS = {int(s): s.name for s in signal.Signals}


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
        # files[i]: (path under the remote directory, bytes) of what server i receives
        self.files: list[list[tuple[str, int]]] = []
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
        if rc > 128 and rc - 128 in _SIGNALS:
            # The shell's own "Killed" line says less than the signal's name.
            raise LtmError(f"{self.label}: `agent {step}` was killed by "
                           f"{_SIGNALS[rc - 128]} there (status {rc})")
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

    def prepare(self, job: ClientJob, parties: int,
                clients: tuple[int, int] | None = None) -> Prepared:
        """Every server's files, prepared on the client host (they stay there): for all
        clients, or for the range ``clients`` = (start, stop) alone."""
        layout = job.file_layout
        if clients is None:
            sketch, data = job.sketch, job.data
        else:
            sketch, data = range_sketch(job.sketch, *clients), job.rows.read(*clients)
        sketch_file = io.BytesIO()
        np.savez(sketch_file, rows=sketch.rows, signs=sketch.signs, m=np.int64(sketch.m))
        matrix = io.BytesIO()
        np.save(matrix, np.ascontiguousarray(data), allow_pickle=False)
        params = {"noise": dataclasses.asdict(job.noise), "frac_bits": job.fp.frac_bits,
                  "parties": parties, "layout": layout.kind, "block_rows": layout.block_rows,
                  "chunk_blocks": layout.chunk_blocks, "format": job.share_format.name,
                  "sharing": job.sharing}
        self._put({"data.npy": matrix.getvalue(), "sketch.npz": sketch_file.getvalue(),
                   "params.json": json.dumps(params).encode()})
        result = self._agent("prepare", self.remote_dir or ".", timeout=job.timeout)
        shape = tuple(result["shape"])
        expected = np.frombuffer(base64.b64decode(result["expected"]), "<u8").reshape(shape)
        abs_sums = np.frombuffer(base64.b64decode(result["abs_sums"]), "<f8").reshape(shape)
        self.files = [[(str(name), int(size)) for name, size in party]
                      for party in result["files"]]
        return Prepared(expected.astype(np.uint64), abs_sums.astype(np.float64),
                        list(result["upload_bytes"]), float(result["seconds"]),
                        result["stats"])

    def send(self, servers: list[tuple[int, Host, int, Path, list[tuple[str, str]]]],
             timeout: float) -> dict[int, float]:
        """Send server i its files ((here, there) pairs) at (mpc_host, port), pinning its
        certificate; seconds each."""
        targets = []
        files = {"client.pem": self.cert.read_bytes(), "client.key": self.key.read_bytes()}
        for party, host, port, cert, pairs in servers:
            files[f"server-P{party}.pem"] = cert.read_bytes()
            targets.append({"party": party, "host": host.mpc_host, "port": port,
                            "peer": f"server-P{party}.pem", "files": [list(p) for p in pairs]})
        files["targets.json"] = json.dumps(targets).encode()
        self._put(files)
        reply = self._agent("send", "targets.json", "client.pem", "client.key", timeout=timeout)
        return {int(k): float(v) for k, v in reply["seconds"].items()}

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


def combine_parts(parts: list[Prepared], clients: list[int]) -> Prepared:
    """The client hosts' parts as one: the plaintext sketches summed (in the ring, as the
    servers' sums are), bytes per server summed, the slowest host's seconds (they
    prepare at once), and the noise statistics pooled by each host's clients."""
    expected = np.zeros_like(parts[0].expected)
    abs_sums = np.zeros_like(parts[0].abs_sums)
    for part in parts:
        expected += part.expected  # uint64: wraps modulo 2^64, like the shares
        abs_sums += part.abs_sums
    upload = [sum(sizes) for sizes in zip(*(p.upload_bytes for p in parts), strict=True)]
    stats: dict = {}
    if all("noise_mean" in p.stats and "noise_var" in p.stats for p in parts):
        weights = np.asarray(clients, dtype=np.float64) / sum(clients)
        means = np.asarray([p.stats["noise_mean"] for p in parts])
        seconds = np.asarray([p.stats["noise_var"] for p in parts]) + means ** 2
        mean = float(weights @ means)
        stats = {"noise_mean": mean, "noise_var": float(weights @ seconds) - mean ** 2}
    return Prepared(expected, abs_sums, upload, max(p.seconds for p in parts), stats)
