"""A real MP-SPDZ party killed mid-run: a clean error and no process left behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from _runs import staged

from harness.errors import PartyError
from harness.experiments import RunConfig

pytestmark = pytest.mark.mpspdz


def _processes_in(root: Path) -> list[int]:
    """PIDs whose working directory lies inside ``root``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(root)) and not _zombie(entry):
                pids.append(int(entry))
    return pids


def _zombie(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_killed_party_stops_all(tmp_path, mp_spdz, program_cache):
    cfg = RunConfig(out=tmp_path / "o", program="reference", parties=3, clients=300_000,
                    rows=10, dim=4, noise="none", seed=1, cache_dir=program_cache)
    run = staged(mp_spdz, cfg, tmp_path / "work")
    cluster = run.cluster
    outcome: dict = {}

    def target():
        try:
            cluster.run(run.program, timeout=120)
        except PartyError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    victim_dir = str(cluster.party_dir(1))
    deadline = time.monotonic() + 30
    victim = None
    while victim is None and time.monotonic() < deadline:
        for pid in _processes_in(cluster.workdir):
            if os.readlink(f"/proc/{pid}/cwd") == victim_dir:
                victim = pid
        time.sleep(0.002)
    assert victim, "party 1 never started"
    time.sleep(0.2)  # let it get into the computation
    os.kill(victim, signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive()
    err = outcome.get("error")
    assert err is not None, "the run survived a killed party"
    # P1 is blamed with its real status, even when P0, losing its peer, exits within the
    # same poll (run_group then prefers the party a signal killed).
    assert (err.party, err.returncode) == ("P1", -signal.SIGKILL), str(err)
    assert str(err).splitlines()[0] == "P1 was killed by SIGKILL; stopped P0, P2"
    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously
    while _processes_in(cluster.workdir) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _processes_in(cluster.workdir) == []
