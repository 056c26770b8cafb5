"""A streamed run over SSH: each server sums its shares on its host as they arrive.

Nothing of the clients' rows reaches a server as a file. Each server's host
agent listens (``serve``, :mod:`harness.remote.streaming`) and the clients
connect to every server over TLS, pinning its per-run certificate, while the
servers present theirs and pin the clients' one: from this machine's client
workers when the inventory has no client host, else from each ``[[client]]``
host's own workers over its own contiguous range of clients
(:meth:`StreamPlan.host_span`). A server adds each chunk into its m x d
accumulators as it arrives and leaves only its aggregate (the ``local``
program), or writes its share file and the public schedule (``reference``), in
its working directory, where the run then finds them; or, where the job's route
feeds the parties (``fast``), feeds its party, started first and waiting at its
public input, each chunk as it comes: no share file is ever whole, here or there.

What comes back here is what verification needs (each worker's plaintext sums)
and each side's figures, assembled as a local streamed run's are. If anything
fails, the servers' own reasons are named before the clients' (a client only
sees that a server closed its stream), and every host's directory is removed.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from harness.engine import make_certificates
from harness.errors import LtmError
from harness.remote._client import ClientHost, StreamCut
from harness.remote._group import HOST_ERRORS, PartyGroup
from harness.remote._party import PGID_FILE, Upload
from harness.remote._results import HostGroupError, labelled
from harness.remote._steps import CERT_NAME, input_file_there, share_file_there
from harness.stream import (
    ProducerTotals,
    Streamed,
    StreamPlan,
    StreamSpec,
    TlsRoute,
    assemble_stream,
    stream_clients,
)

if TYPE_CHECKING:
    from harness.engine import ClientJob

__all__ = ["SCHEDULE_FILE", "SPEC_FILE", "stream_to_hosts"]

SPEC_FILE = "stream.json"
SCHEDULE_FILE = "schedule.txt"  # a streamed fast run's public input, until the run
_SETTLE_S = 3.0  # for a server's own failure to arrive once a client lost its stream


def stream_to_hosts(group: PartyGroup, job: ClientJob, clients: list[ClientHost],
                    staging: list[Path], workdir: Path, base_port: int, *,
                    fed: tuple[str, list[list[Upload]]] | None = None) -> Streamed:
    """Run the stream into the group's servers; the group stays open for the run.

    ``staging[i]`` is party i's local staging directory (its certificates and key);
    the clients' per-run certificate is the client hosts' one, or made here. With
    ``fed`` (the job's route feeds the parties: the program's name and each party's
    files) each party starts first, held at its public input, which its server then
    feeds as the stream comes; the servers then listen past the parties' ports, on
    base port + parties + i.
    """
    plan = job.stream_plan(len(staging), tuple(c.workers() for c in clients))
    if plan.chunks < plan.workers:  # few clients: smaller chunks, so every host has some
        plan = dataclasses.replace(plan, chunk=-(-plan.n // plan.workers))
    spec = StreamSpec(plan, job.sketch, job.as_input, job.blocks)
    spec_file = workdir / SPEC_FILE
    spec_file.write_text(spec.to_json())
    if clients:
        cert, key = clients[0].cert, clients[0].key
    else:
        [(key, cert, _)] = make_certificates(1, workdir / "stream-client-cert")
    uploads, serve = [], []
    ports = [base_port + (len(staging) if fed else 0) + i for i in range(len(staging))]
    for i, party_dir in enumerate(staging):
        files = [Upload(SPEC_FILE, local=spec_file), Upload("client.pem", local=cert)]
        for path in sorted((party_dir / "Player-Data").iterdir()):
            if path.name == f"P{i}.key":
                files.append(Upload(f"Player-Data/{path.name}", local=path, mode=0o600))
            elif CERT_NAME.fullmatch(path.name):
                files.append(Upload(f"Player-Data/{path.name}", local=path))
        if fed is not None:  # the party starts before its stream: all it needs, now
            files += [u for u in fed[1][i] if u.remote not in {f.remote for f in files}]
        uploads.append(files)
        dest = input_file_there(i) if job.as_input else share_file_there(i)
        args = [SPEC_FILE, str(i), str(ports[i]), f"Player-Data/P{i}.pem",
                f"Player-Data/P{i}.key", "client.pem", dest, "--timeout", str(job.timeout),
                "--bind", group.parties[i].host.listen_address]
        if fed is not None:  # the schedule goes into the party's FIFO, a line at a time
            args += ["--gate", f"Programs/Public-Input/{fed[0]}", "--party-pid-file",
                     PGID_FILE]
        elif job.blocks is not None:  # every server needs the public schedule: each writes it
            args += ["--schedule", SCHEDULE_FILE]
        serve.append(args)
    if job.blocks is not None and fed is None:  # the share file each server writes whole
        group.extra_bytes = [8 * job.n * plan.s * plan.d * job.share_format.words] * plan.parties
    why = ("each server receives its stream of shares from the client hosts with it"
           if clients else "each server takes its stream of shares there")
    started = time.perf_counter()
    group.open_stream(uploads, serve, why, ports=ports,
                      fed=fed[0] if fed is not None else None)
    servers = [(p.host, ports[p.index],
                staging[p.index] / "Player-Data" / f"P{p.index}.pem") for p in group.parties]
    try:
        totals = _run_clients(plan, job, clients, servers, cert, key, workdir, group)
    except HostGroupError:
        raise
    except _ClientHostFailed as exc:
        raise HostGroupError(f"{exc} (no party was started)", group.results) from None
    except (*HOST_ERRORS, LtmError) as exc:
        raise _failure(group, exc) from None
    figures = group.finish_stream()
    streamed = assemble_stream(plan, totals, figures, time.perf_counter() - started, job.blocks)
    if len(clients) > 1:  # public: which client host made which clients
        streamed.layout["client_ranges"] = [list(plan.host_span(h)) for h in range(len(clients))]
    return streamed


def _run_clients(plan: StreamPlan, job: ClientJob, clients: list[ClientHost], servers: list,
                 cert: Path, key: Path, workdir: Path,
                 group: PartyGroup) -> list[ProducerTotals]:
    """Every client worker's totals: here, or from each client host's workers."""
    if not clients:
        route = TlsRoute.between_hosts(tuple(h.mpc_host for h, _, _ in servers),
                                       tuple(port for _, port, _ in servers),
                                       tuple(c for _, _, c in servers), cert, key, job.timeout)
        return stream_clients(plan, job.sketch, job.rows, job.noise, job.fp, route,
                              workers=range(plan.workers), timeout=job.timeout)
    seed = job.rows.seed

    def one(k: int) -> list[ProducerTotals]:
        # Synthetic rows travel as their seed; others as this host's range of them.
        rows = {"kind": "synthetic", "seed": seed} if seed is not None else {
            "kind": "npy", "file": "rows.npy", "first": plan.host_span(k)[0]}
        host_spec = StreamSpec(plan, job.sketch, job.as_input, job.blocks, job.noise,
                               job.fp.frac_bits, {**rows, "eta": float(job.rows.eta)})
        return clients[k].stream(host_spec, None if seed is not None else job.rows, k,
                                 servers, job.timeout)

    with ThreadPoolExecutor(len(clients), thread_name_prefix="ltm-client-stream") as pool:
        futures = [pool.submit(one, k) for k in range(len(clients))]
        _, pending = wait(futures, return_when=FIRST_EXCEPTION)
        if pending:
            # One client host failed: the servers wait for its streams in vain. Stopping
            # them (the run is lost) ends the other hosts' streams at once, not at the
            # timeout; the hosts' failures are then only the consequence.
            failure = _failure(group, _ClientHostFailed(_culprits(clients, futures)))
            group.close()
            wait(pending)
            raise failure
    if any(f.exception() is not None for f in futures):
        raise _ClientHostFailed(_culprits(clients, futures))
    return [t for f in futures for t in f.result()]


def _culprits(clients: list[ClientHost], futures: list[Future]) -> str:
    """The client hosts that failed of themselves, named; only if none did, those that
    lost their streams (to a server, which :func:`_failure` then names first).

    A host that failed makes the servers close every other host's streams a moment
    later, and that other host's report may come in first: its own failure gets
    :data:`_SETTLE_S` to arrive.
    """
    deadline = time.monotonic() + _SETTLE_S
    while True:
        failed = [(c, exc) for c, f in zip(clients, futures, strict=True)
                  if f.done() and (exc := f.exception()) is not None]
        causes = [(c, e) for c, e in failed if not isinstance(e, StreamCut)]
        running = [f for f in futures if not f.done()]
        if causes or not running or time.monotonic() >= deadline:
            break
        wait(running, timeout=deadline - time.monotonic(), return_when=FIRST_COMPLETED)
    for _, exc in failed:
        if not isinstance(exc, HOST_ERRORS):
            raise exc  # a bug keeps its traceback
    return "; ".join(labelled(c.label, e) for c, e in causes or failed)


def _failure(group: PartyGroup, exc: BaseException) -> LtmError:
    """The error to raise when the clients' side failed: a server that failed of itself
    is the cause of what the clients then saw, named first; servers that only lost a
    stream (their own status says so) are the consequence of a client host's failure."""
    causes = group.stream_failures(_SETTLE_S)
    if causes:
        return HostGroupError("; ".join(causes) + f"; the clients then: {exc} "
                              "(no party was started)", group.results)
    if isinstance(exc, _ClientHostFailed):
        return exc
    return exc if isinstance(exc, LtmError) else LtmError(str(exc))


class _ClientHostFailed(LtmError):
    """A client host failed or died while it streamed: named, before its consequences."""
