"""The servers' noise on real sshd hosts, verified bit for bit with the noise revealed
(the test aid): central's is in the program, so each host's party draws its share of the
coins there; dng's is each server's own, drawn by its host's agent into its input file
there, never here."""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _sshd import processes_under, trusted_inventory

from harness.engine import parse_output
from harness.experiments import RunConfig, run
from harness.privacy import Dng
from harness.remote.ssh import HostGroupError, SshCluster

pytestmark = [
    pytest.mark.root, pytest.mark.mpspdz,
    pytest.mark.skipif(os.geteuid() != 0, reason="the fake hosts are sshd servers logged into "
                       "as root"),
]


def test_central_noise_runs_on_the_hosts_and_verifies(tmp_path, farm, mp_spdz, program_cache):
    path, _ = trusted_inventory(tmp_path, farm, mp_spdz.root, 3)
    cfg = RunConfig(out=tmp_path / "out", clients=3000, rows=4, dim=2, seed=5,
                    cache_dir=program_cache, parties=3, program="local",
                    protocol="replicated-ring", hosts=path, mechanism="central",
                    epsilon=4.0, delta=1e-3, grid_bits=0, reveal_noise=True)
    result = run(cfg)
    v = result["verification"]
    assert v["ok"] and v["mismatches"] == 0 and v["noise_check"]["exact"]
    assert result["parameters"]["hosts"] == str(path)
    assert result["privacy"]["certified_epsilon"] <= 4.0


# --- dng: each server draws its own noise on its host --------------------------------------

def _input_files(fakes: list, parties: int) -> list[Path]:
    """Each server's input file in its host's one working directory of the run, whose
    modes are checked: the noise is a secret, 0600 in 0700 directories."""
    files = []
    for i, fake in enumerate(fakes[:parties]):
        [workdir] = list(fake.workdir.iterdir())  # the run's ltm-* directory
        file = workdir / "Player-Data" / f"Input-P{i}-0"
        for directory in (workdir, file.parent):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
        files.append(file)
    return files


# spdz2k's servers input their aggregates (no client can write its shares): the noise
# follows the aggregate in the same file. The others' aggregates are share files.
@pytest.mark.parametrize(("protocol", "parties", "honest", "aggregate_first"),
                         [("replicated-ring", 3, 2, False), ("semi2k", 3, 1, False),
                          ("spdz2k", 2, 1, True)])
def test_dng_noise_is_drawn_on_each_host_and_verifies_bit_for_bit(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch, protocol, parties, honest,
        aggregate_first):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, parties)
    m, d = 4, 2
    held: dict[int, np.ndarray] = {}  # each host's noise as the MPC is about to read it
    mpc = SshCluster.run

    def run_after_looking(self, program, **kw):
        for i, file in enumerate(_input_files(fakes, parties)):
            words = np.array(file.read_text().split(), dtype=np.int64)
            assert words.size == (2 if aggregate_first else 1) * m * d
            held[i] = words[-m * d:]
        return mpc(self, program, **kw)

    monkeypatch.setattr(SshCluster, "run", run_after_looking)
    cfg = RunConfig(out=tmp_path / "out", clients=300, rows=m, dim=d, seed=5,
                    cache_dir=program_cache, parties=parties, program="local",
                    protocol=protocol, hosts=path, mechanism="dng", epsilon=4.0, delta=1e-3,
                    reveal_noise=True, keep_work=True)
    result = run(cfg)
    v = result["verification"]
    assert v["ok"] and v["mismatches"] == 0 and v["noise_check"]["exact"]
    privacy = result["privacy"]
    assert (privacy["servers"], privacy["honest_servers"]) == (parties, honest)
    assert privacy["certified_epsilon"] <= 4.0
    # The noise the MPC added (revealed by the test aid) is the sum of what the hosts'
    # own files held: each drew its own there, every one different.
    # and exactly the noise the hosts drew, by the digests their agents reported
    assert v["noise_check"]["digest_match"] is True
    assert sorted(held) == list(range(parties))
    assert all(np.any(held[i] != held[j]) for i in held for j in held if i < j)
    work = tmp_path / "out" / "work"
    printed = (work / "logs" / "P0.stdout").read_text()
    revealed_noise = parse_output("P0", printed, 2 * m * d)[m * d:]
    assert np.array_equal(revealed_noise, sum(held.values()).astype(np.uint64))
    # Nothing of it was ever written here, and no host keeps it after the run.
    assert list(work.rglob("Input-P*")) == []
    assert [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()] == []


def test_a_host_whose_agent_cannot_draw_fails_the_run_naming_it(
        tmp_path, farm, mp_spdz, program_cache, monkeypatch):
    # Parameters no server may draw outside the MPC: every host's agent refuses them.
    to_json = Dng.to_json
    monkeypatch.setattr(Dng, "to_json", lambda self: json.dumps(
        {**json.loads(to_json(self)), "kind": "central"}))
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    cfg = RunConfig(out=tmp_path / "out", clients=300, rows=4, dim=2, seed=5,
                    cache_dir=program_cache, parties=2, program="local", protocol="semi2k",
                    hosts=path, mechanism="dng", epsilon=4.0, delta=1e-3)
    with pytest.raises(HostGroupError) as info:
        run(cfg)
    message = str(info.value)
    assert "\n" not in message and "no party was started" in message
    for fake in fakes:
        assert f"{fake.name} " in message or f"{fake.name}:" in message
    assert "is not the noise's parameters" in message
    assert [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()] == []
    assert not (tmp_path / "out").exists()


def _kill_noise_agent(root: Path, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the host agent's step (dng's noise) under ``root`` as soon as it runs."""
    while not stop.is_set() and not killed:
        for pid, _ in processes_under(root):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"harness.remote.agent" in cmdline and b"input" in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
        time.sleep(0.002)


def test_a_noise_agent_killed_on_its_host_is_named_by_step_and_host(
        tmp_path, farm, mp_spdz, program_cache):
    path, fakes = trusted_inventory(tmp_path, farm, mp_spdz.root, 2)
    victim = fakes[1]
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_noise_agent, args=(victim.workdir, killed, stop))
    killer.start()
    cfg = RunConfig(out=tmp_path / "out", clients=300, rows=4, dim=2, seed=5,
                    cache_dir=program_cache, parties=2, program="local", protocol="semi2k",
                    hosts=path, mechanism="dng", epsilon=4.0, delta=1e-3)
    try:
        with pytest.raises(HostGroupError) as info:
            run(cfg)
    finally:
        stop.set()
        killer.join()
    assert killed, "the victim's noise agent was never seen"
    message = str(info.value)
    # the step and its host, not the shell wrapper it ran in
    assert message == (f"p1 (root@127.0.0.1:{victim.port}): its agent's input step was "
                       "killed by SIGKILL there (status 137) (no party was started)")
    assert not (tmp_path / "out").exists()
    assert [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()] == []
