"""A streamed ``local`` run's parties start before the clients stream and wait at their
inputs: real MP-SPDZ parties, their state read from /proc."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _sshd import processes_under

from harness.engine import parse_output, party_input_file
from harness.errors import PartyError
from harness.experiments import (
    RunConfig,
    build_workload,
    client_job,
    make_cluster,
    program_for,
)
from harness.stream import RING_CHUNKS

pytestmark = pytest.mark.mpspdz


def _setup(mp, tmp_path: Path, program_cache, **kw):
    kw.setdefault("program", "local")
    cfg = RunConfig(out=tmp_path / "o", parties=3, clients=20_000, rows=10, dim=3,
                    noise="none", seed=2, cache_dir=program_cache, **kw).validate()
    work = build_workload(cfg)
    return cfg, program_for(mp, cfg, work), make_cluster(cfg, mp, tmp_path / "w"), \
        client_job(cfg, work)


def _party_processes(cluster) -> dict[int, int]:
    """Party i's live process (its working directory is the party's), by party."""
    found = {}
    for i in range(cluster.parties):
        live = processes_under(cluster.party_dir(i))
        if live:
            found[i] = live[0][0]
    return found


def _waiting_at_a_fifo(pid: int) -> bool:
    """Whether one of the process's threads is blocked opening a FIFO no one writes."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/wchan") as fh:
                if fh.read() == "wait_for_partner":
                    return True
        except OSError:
            pass
    return False


def _all_held(cluster, timeout: float = 60.0) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = _party_processes(cluster)
        if len(pids) == cluster.parties and all(map(_waiting_at_a_fifo, pids.values())):
            return pids
        time.sleep(0.01)
    pytest.fail(f"the parties did not all reach their inputs: {_party_processes(cluster)}")


def _gone(cluster, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout  # SIGKILL is delivered asynchronously
    while _party_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _party_processes(cluster)


def test_the_parties_wait_at_their_inputs_while_the_clients_stream(tmp_path, mp_spdz,
                                                                   program_cache):
    cfg, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache)
    with cluster.launch(job, program, timeout=60) as started:
        assert started
        # Every party has started, connected and waits at its inputs, none of which
        # exists yet: the clients have not begun.
        _all_held(cluster)
        assert not any(party_input_file(cluster.party_dir(i), i).exists()
                       for i in range(cluster.parties))
        prepared = cluster.prepare(job)
        runs = cluster.run(program, timeout=60)
    revealed = parse_output("P0", runs[0].completed.stdout, 10 * 3).reshape(10, 3)
    assert np.array_equal(revealed, prepared.expected)
    assert [r.party for r in runs] == [0, 1, 2] and all(r.stats["time_s"] > 0 for r in runs)
    # Each party's wall time runs from its release, not from its start before the stream.
    assert all(r.completed.wall_seconds < 30 for r in runs)
    assert _party_processes(cluster) == {}
    # What stays of the FIFO in the work directory is the plain (empty) public input.
    gate = cluster.party_dir(1) / "Programs" / "Public-Input" / program.name
    assert gate.is_file() and gate.read_text() == ""


def test_held_parties_are_stopped_when_the_run_ends_before_them(tmp_path, mp_spdz,
                                                               program_cache):
    _, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache)
    with pytest.raises(RuntimeError, match="the stream failed"), \
            cluster.launch(job, program, timeout=60):
        _all_held(cluster)
        raise RuntimeError("the stream failed")
    assert _gone(cluster)


def test_a_party_killed_while_held_is_named_and_stops_the_others(tmp_path, mp_spdz,
                                                                 program_cache):
    _, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache)
    with cluster.launch(job, program, timeout=60):
        pids = _all_held(cluster)
        os.kill(pids[1], signal.SIGKILL)
        cluster.prepare(job)
        with pytest.raises(PartyError) as caught:
            cluster.run(program, timeout=60)
    assert (caught.value.party, caught.value.returncode) == ("P1", -signal.SIGKILL)
    assert str(caught.value).splitlines()[0] == "P1 was killed by SIGKILL; stopped P0, P2"
    assert _gone(cluster)


def test_a_fast_run_s_parties_are_fed_the_stream_and_sum_it_as_it_comes(tmp_path, mp_spdz,
                                                                          program_cache):
    cfg, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache, program="fast")
    with cluster.launch(job, program, timeout=60) as started:
        assert started
        _all_held(cluster)
        prepared = cluster.prepare(job)
        # Each server fed its party: the share file is a ring, which stays small.
        assert 0 < prepared.layout["ring_chunks"] <= RING_CHUNKS
        runs = cluster.run(program, timeout=60)
    revealed = parse_output("P0", runs[0].completed.stdout, 10 * 3)
    assert np.array_equal(revealed.reshape(10, 3), prepared.expected)
    # What the parties did after the stream is apart from their summing (timer 1).
    assert all(r.stats["after_stream_s"] >= 0 and r.stats["busy_s"] > 0 for r in runs)
    assert not cluster.reuses_inputs  # the ring is no input to run on again
    assert _gone(cluster)


def test_a_fed_party_killed_while_held_is_named_at_once(tmp_path, mp_spdz, program_cache):
    # Its server waits for it at its FIFO; a party gone is seen there, not after --timeout.
    _, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache, program="fast")
    with cluster.launch(job, program, timeout=60):
        pids = _all_held(cluster)
        os.kill(pids[1], signal.SIGKILL)
        began = time.monotonic()
        with pytest.raises(PartyError) as caught:
            cluster.prepare(job)
        assert time.monotonic() - began < 30  # job.timeout is 900 s
    assert (caught.value.party, caught.value.returncode) == ("P1", -signal.SIGKILL)
    assert _gone(cluster)


def test_a_fed_party_killed_mid_stream_is_named(tmp_path, mp_spdz, program_cache):
    # Its server's next line finds the FIFO closed: the stream stops, the party is named.
    cfg = RunConfig(out=tmp_path / "o", program="fast", parties=3, clients=400_000, rows=10,
                    dim=10, sparsity=4, noise="none", seed=2,
                    cache_dir=program_cache).validate()
    work = build_workload(cfg)
    program = program_for(mp_spdz, cfg, work)
    cluster = make_cluster(cfg, mp_spdz, tmp_path / "w")
    job = client_job(cfg, work)

    def kill_once_fed(pid: int, ring: Path) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ring.exists() and ring.stat().st_size > 0 and not _waiting_at_a_fifo(pid):
                os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.002)

    with cluster.launch(job, program, timeout=60):
        pids = _all_held(cluster)
        killer = threading.Thread(target=kill_once_fed, args=(pids[1], cluster.share_file(1)))
        killer.start()
        began = time.monotonic()
        try:
            with pytest.raises(PartyError) as caught:
                cluster.prepare(job)
        finally:
            killer.join()
        assert time.monotonic() - began < 30
    assert (caught.value.party, caught.value.returncode) == ("P1", -signal.SIGKILL)
    assert _gone(cluster)


@pytest.mark.parametrize("options", [{"program": "reference", "input_mode": "shares"},
                                     {"program": "fast", "tamper": 1}])
def test_a_reference_or_tampered_run_is_not_held(tmp_path, mp_spdz, program_cache, options):
    # reference reads its whole schedule first; --tamper changes a share after the stream
    _, program, cluster, job = _setup(mp_spdz, tmp_path, program_cache, **options)
    with cluster.launch(job, program, timeout=60) as started:
        assert not started
        assert _party_processes(cluster) == {}
