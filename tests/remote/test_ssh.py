"""The SSH runner against real OpenSSH servers on loopback (see tests/_sshd.py).

Every fake host is its own sshd with its own host key and working directory,
and the parties are the real MP-SPDZ, so a run over SSH is verified exactly
like a local one: the revealed sketch must equal the plaintext computation.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import paramiko
import pytest
from _sshd import (
    FakeHost,
    SshFarm,
    descendants,
    free_port,
    mpc_base_port,
    processes_under,
    write_inventory_file,
)

from harness.cli import main
from harness.engine import Cluster
from harness.errors import MpSpdzError
from harness.experiments import (
    RunConfig,
    build_workload,
    client_job,
    program_for,
    run,
)
from harness.remote._connect import ConnectOptions, HostKeyError, SshConnectError, connect
from harness.remote._keys import ServerKey, pinned_keys, write_pinned
from harness.remote._party import RemoteParty
from harness.remote.hosts import Host, load_inventory
from harness.remote.ssh import ConnectionLost, HostGroupError, SshCluster, trust_hosts

IS_ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not IS_ROOT, reason="the fake hosts are sshd servers logged into as root"),
]

FAST = ConnectOptions(timeout=5, attempts=2, backoff=0.1)


# --- fixtures and helpers ------------------------------------------------------------------

def make_inventory(tmp_path: Path, farm: SshFarm, mp_root: Path, parties: int,
                   harness: bool = True, client: bool | int = False,
                   **overrides: dict) -> tuple[Path, list[FakeHost]]:
    """``parties`` running fake hosts and an inventory naming them (keys not yet trusted);
    ``harness``: set up as by ``ltm hosts setup``; ``client``: a [client] host as well
    (with the harness), last in the list; a number: that many [[client]] hosts."""
    fakes = [farm.add(f"p{i}", harness=harness) for i in range(parties)]
    hosts = [f.as_host(farm.client_key, mp_root, **overrides.get(f.name, {})) for f in fakes]
    names = ["client"] if client is True else [f"client{k}" for k in range(int(client))]
    for name in names:
        fakes.append(farm.add(name, harness=True))
    clients = tuple(f.as_host(farm.client_key, mp_root) for f in fakes[parties:])
    path = write_inventory_file(tmp_path / "hosts.toml", hosts, mpc_base_port(parties),
                                clients=clients)
    return path, fakes


def pub_key(fake: FakeHost) -> tuple[str, str]:
    key_type, blob = fake.host_key.with_suffix(".pub").read_text().split()[:2]
    return key_type, blob


def fingerprint_by_openssh(fake: FakeHost) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(fake.host_key.with_suffix(".pub"))],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def remote_dirs(fakes: list[FakeHost]) -> list[Path]:
    return [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()]


def wait_no_processes(root: Path, seconds: float = 5.0) -> list[tuple[int, str]]:
    deadline = time.monotonic() + seconds
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def small_config(tmp_path: Path, cache: Path, **kw) -> RunConfig:
    base = dict(out=tmp_path / "out", clients=2000, rows=10, dim=4, noise="none", seed=3,
                cache_dir=cache)
    base.update(kw)
    return RunConfig(**base)


def staged(mp_spdz, cfg: RunConfig, inventory: Path, workdir: Path, **kw):
    """An SshCluster with the clients' inputs prepared, through harness.experiments' public
    functions, as a run prepares them (on these hosts: a loopback config would stream)."""
    cfg = dataclasses.replace(cfg, hosts=inventory).validate()
    work = build_workload(cfg)
    program = program_for(mp_spdz, cfg, work)
    cluster = SshCluster(mp_spdz, load_inventory(inventory), workdir, inventory_path=inventory,
                         **kw)
    assert isinstance(cluster, Cluster) and not cluster.reuses_inputs
    prepared = cluster.prepare(client_job(cfg, work))
    return cluster, program, prepared


# --- full runs -------------------------------------------------------------------------------

@pytest.mark.mpspdz
@pytest.mark.parametrize("parties,program,protocol", [
    (2, "fast", "semi2k"), (3, "reference", "semi2k"), (3, "fast", "ps-rep-ring")])
def test_run_over_ssh_is_verified_like_a_local_run(tmp_path, farm, mp_spdz, program_cache,
                                                   parties, program, protocol):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, parties)
    pinned = trust_hosts(inventory, echo=lambda line: None)
    assert [r.status for r in pinned] == ["added"] * parties
    cfg = small_config(tmp_path, program_cache, program=program, hosts=inventory,
                       protocol=protocol)
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    assert result["metadata"]["protocol"] == protocol
    assert result["verification"]["entries"] == 10 * 4
    assert len(result["parties"]) == parties
    for row in result["parties"]:
        assert row["upload_s"] > 0
        assert row["time_s"] > 0 and row["rounds"] > 0
    assert remote_dirs(fakes) == []  # every remote working directory was removed
    assert wait_no_processes(farm.root) == []


@pytest.mark.mpspdz
def test_reproduce_over_ssh_times_the_upload_apart(tmp_path, farm, mp_spdz, program_cache):
    from harness.experiments.reproduce import RAW_FILE, ReproduceConfig, load_raw, reproduce

    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 3)
    trust_hosts(inventory, echo=lambda line: None)
    # Table 4 runs S = 2: on the inventory's first two hosts.
    out = reproduce(ReproduceConfig(tables="table4", out=tmp_path / "sweep", repeat=1,
                                    scale=0.002, hosts=inventory, cache_dir=program_cache,
                                    progress=False))
    raw = load_raw(out / RAW_FILE)
    assert len(raw) == 5 * 2 and raw["verified"].all()
    assert set(raw["hosts"]) == {str(inventory)}
    assert (raw["upload_s"] > 0).all() and (raw["client_upload_s"] > 0).all()
    # the clients' upload is the slowest server's, and not part of any party's T_MPC
    per_rep = raw.groupby(["cell", "repetition"])
    assert np.allclose(per_rep["upload_s"].max(), per_rep["client_upload_s"].first())
    assert (out / "table4.png").exists()
    assert not fakes[2].workdir.exists()  # the third host was never used
    assert remote_dirs(fakes) == []
    assert wait_no_processes(farm.root) == []


@pytest.mark.mpspdz
def test_each_host_gets_only_its_own_secrets(tmp_path, farm, mp_spdz, program_cache):
    inventory, _ = make_inventory(tmp_path, farm, mp_spdz.root, 3)
    trust_hosts(inventory, echo=lambda line: None)
    # The data owner's text is the only input file sent: to party 0 alone. (Shares go by
    # the servers' streams, never as files: tests/remote/test_host_fed.py.)
    cfg = small_config(tmp_path, program_cache, parties=3, input_mode="party")
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work")
    for i in range(3):
        names = {u.remote: u for u in cluster.uploads(i, program, 15000)}
        assert not any(n.startswith("Persistence/") for n in names)
        assert [n for n in names if n.startswith("Player-Data/Input-P")] == (
            ["Player-Data/Input-P0-0"] if i == 0 else [])
        assert [n for n in names if n.endswith(".key")] == [f"Player-Data/P{i}.key"]
        assert names[f"Player-Data/P{i}.key"].mode == 0o600
        assert {f"Player-Data/P{j}.pem" for j in range(3)} <= set(names)
        assert len([n for n in names if re.fullmatch(r"Player-Data/[0-9a-f]{8}\.0", n)]) == 3
        assert f"Programs/Public-Input/{program.name}" in names
        assert names["ip"].content.decode().splitlines() == [
            f"127.0.0.1:{15000 + j}" for j in range(3)]
        compiled = {p.name for p in (program.programs_dir / "Schedules").iterdir()}
        assert {n.split("/")[-1] for n in names if n.startswith("Programs/Schedules/")} \
            == compiled


# --- seeded sharing: servers expand their own seeds on their hosts, as they come ------------

def _seeded_upload(result: dict, fmt_words: int) -> list[int]:
    """What each server must receive: per component c it holds, 8 bytes per real word of
    the clients j with j mod C = c (who send c in full), 32 bytes for every other client."""
    p = result["parameters"]
    n, parties = p["clients"], p["parties"]
    count = parties if fmt_words == 1 else 3
    held = [(i,) for i in range(parties)] if fmt_words == 1 else \
        [(i, (i - 1) % 3) for i in range(3)]
    leading = [len(range(c, n, count)) for c in range(count)]
    return [sum(8 * p["sparsity"] * p["dim"] * leading[c] + 32 * (n - leading[c])
                for c in held[i]) for i in range(parties)]


@pytest.mark.mpspdz
@pytest.mark.parametrize("parties,protocol,client", [
    (2, "semi2k", False), (3, "ps-rep-ring", False), (3, "semi2k", True),
    (3, "replicated-ring", True)])
def test_reference_seeded_streams_to_each_host_and_verifies(tmp_path, farm, mp_spdz,
                                                            program_cache, monkeypatch,
                                                            parties, protocol, client):
    # reference with seeded shares, from here or from the client host: each server takes
    # its stream of seeds and full words on its host, expands them as they come and writes
    # one row per slot (whole share files, expanded after an SFTP upload, before).
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, parties, harness=True,
                                      client=client)
    trust_hosts(inventory, echo=lambda line: None)
    uploaded: list[str] = []
    original = RemoteParty.upload

    def spy(self, directories, uploads, abandon):  # every file sent to a server by SFTP
        uploaded.extend(u.remote for u in uploads)
        return original(self, directories, uploads, abandon)

    monkeypatch.setattr(RemoteParty, "upload", spy)
    cfg = small_config(tmp_path, program_cache, parties=parties, program="reference",
                       protocol=protocol, hosts=inventory, sharing="seeded",
                       input_mode="shares")
    assert cfg.validate().route.where == "servers"
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    assert result["parameters"]["sharing"] == "seeded"
    assert result["parameters"]["layout"]["kind"] == "slots-per-chunk"
    t = result["timings"]
    assert t["stream_expand_s"] > 0 and "expand_s" not in t
    # the upload is what each server got, as it counted it on its streams: per component,
    # seeds and some clients' words, in frames
    words = 2 if protocol != "semi2k" else 1
    sent = result["client_upload_bytes"]
    assert all(x < got <= x + 2 * 1024 for x, got in
               zip(_seeded_upload(result, words), sent, strict=True)), sent
    # No share, seed or input file went by SFTP: only the streams carried them.
    assert not [name for name in uploaded
                if name.startswith(("Persistence/", "Player-Data/Input-P"))]
    assert remote_dirs(fakes) == []
    assert wait_no_processes(farm.root) == []


@pytest.mark.mpspdz
def test_full_replicated_shares_from_a_client_host_verify(tmp_path, farm, mp_spdz,
                                                          program_cache):
    # The client host streams the protocol's own share format, not always additive, to
    # reference's servers, which write one row per slot on their hosts.
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 3, harness=True,
                                      client=True)
    trust_hosts(inventory, echo=lambda line: None)
    cfg = small_config(tmp_path, program_cache, parties=3, program="reference",
                       protocol="ps-rep-ring", hosts=inventory, input_mode="shares")
    result = run(cfg)
    assert result["verification"]["ok"], result["verification"]
    assert all("expand_s" not in row for row in result["parties"])
    fmt = cfg.share_format
    assert fmt.words == 2
    layout = result["parameters"]["layout"]
    assert layout["kind"] == "slots-per-chunk" and layout["file_rows"] == 2000
    # what arrived: each server's words of every slot (no header, no padding row), in frames
    assert all(8 * 2 * 2000 * 4 < x <= 8 * 2 * 2000 * 4 + 2 * 1024
               for x in result["client_upload_bytes"])
    assert remote_dirs(fakes) == []


@pytest.mark.mpspdz
@pytest.mark.parametrize("client", [False, True])
def test_seeded_on_a_server_without_the_harness_says_to_set_it_up(tmp_path, farm, mp_spdz,
                                                                  program_cache, capsys,
                                                                  monkeypatch, client):
    import harness.engine.programs as programs

    monkeypatch.setattr(programs, "default_cache_dir", lambda: program_cache)
    # Only the servers lack the harness; a client host always has it here.
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2, harness=False,
                                      client=client)
    trust_hosts(inventory, echo=lambda line: None)
    out = tmp_path / "out"
    code = main(["run", "--hosts", str(inventory), "--sharing", "seeded", "--clients", "500",
                 "--rows", "10", "--dim", "2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and err.startswith("ltm: error: "), err
    assert f"p0 (root@127.0.0.1:{fakes[0].port}): the harness is not installed" in err
    assert "run `ltm hosts setup` first" in err and "(no party was started)" in err
    assert ("from the client host" if client else "takes its stream of shares there") in err
    assert remote_dirs(fakes) == []


# --- host keys ---------------------------------------------------------------------------------

@pytest.mark.mpspdz
def test_unknown_or_wrong_host_key_is_refused_and_nothing_starts(tmp_path, farm, mp_spdz,
                                                                 program_cache):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2)
    known = load_inventory(inventory).known_hosts
    # The data owner's text, written here: the hosts are first reached by run.
    cfg = small_config(tmp_path, program_cache, parties=2, input_mode="party")
    with pytest.raises(HostKeyError, match=rf"{known} .* does not exist.*`ltm hosts trust "
                                           rf"{inventory}` first"):
        staged(mp_spdz, cfg, inventory, tmp_path / "work")  # before any input is prepared

    # p1 is not pinned at all
    write_pinned(known, [(f"[127.0.0.1]:{fakes[0].port}", _server_key(fakes[0]))], replace=False)
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work2")
    with pytest.raises(HostGroupError) as info:
        cluster.run(program, timeout=60)
    message = str(info.value)
    assert f"p1 (root@127.0.0.1:{fakes[1].port})" in message
    assert f"ltm hosts trust {inventory}" in message and "no party was started" in message
    assert [r.host.name for r in info.value.failed] == ["p1"]
    assert isinstance(info.value.failed[0].error, HostKeyError)
    assert not (cluster.workdir / "logs").exists()  # no party ever produced output
    assert remote_dirs(fakes) == []

    # p1 pinned with another machine's key: a changed key, never accepted
    write_pinned(known, [(f"[127.0.0.1]:{fakes[1].port}", _server_key(fakes[0]))], replace=False)
    with pytest.raises(HostGroupError, match=r"p1 \(.*\): its SSH host key CHANGED") as info:
        cluster.run(program, timeout=60)
    assert "--replace" in str(info.value)
    assert not (cluster.workdir / "logs").exists()
    assert remote_dirs(fakes) == []


def _server_key(fake: FakeHost) -> ServerKey:
    return ServerKey(*pub_key(fake))


def test_trust_pins_reports_and_refuses_a_changed_key(tmp_path, farm, mp_spdz):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2)
    known = load_inventory(inventory).known_hosts
    other = farm.client_key.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"# my notes\nother.example {' '.join(other)}\n")
    lines: list[str] = []
    results = trust_hosts(inventory, echo=lines.append)
    assert [r.status for r in results] == ["added", "added"]
    for fake, line in zip(fakes, lines, strict=False):
        assert fingerprint_by_openssh(fake) in line and f"[127.0.0.1]:{fake.port}" in line
    text = known.read_text()
    assert text.startswith("# my notes\nother.example ")  # existing entries kept
    for fake in fakes:
        assert f"[127.0.0.1]:{fake.port} {' '.join(pub_key(fake))}\n" in text

    lines.clear()
    assert [r.status for r in trust_hosts(inventory, echo=lines.append)] == ["unchanged"] * 2
    assert "already pinned" in lines[-1] and known.read_text() == text

    fakes[1].stop()
    fakes[1].new_key()  # the machine was "rebuilt", or someone is in the middle
    fakes[1].start()
    with pytest.raises(HostKeyError, match="CHANGED.*man in the middle.*--replace"):
        trust_hosts(inventory, echo=lambda line: None)
    assert known.read_text() == text  # nothing written
    with pytest.raises(HostKeyError, match="CHANGED"):
        connect(load_inventory(inventory).hosts[1], known, options=FAST)

    results = trust_hosts(inventory, replace=True, echo=lambda line: None)
    assert [r.status for r in results] == ["unchanged", "replaced"]
    new_text = known.read_text()
    assert new_text.startswith("# my notes\nother.example ")
    assert new_text.count(f"[127.0.0.1]:{fakes[1].port} ") == 1
    assert " ".join(pub_key(fakes[1])) in new_text
    connect(load_inventory(inventory).hosts[1], known, options=FAST).close()


def test_hashed_known_hosts_entries_are_recognised_and_replaced(tmp_path, farm):
    target = "[10.0.0.1]:2222"
    old, new = (_server_key(farm.add(name, start=False)) for name in ("old", "new"))
    known = tmp_path / "known_hosts"
    known.write_text(f"{paramiko.HostKeys.hash_host(target)} {old.key_type} {old.base64}\n"
                     f"keep.example {old.key_type} {old.base64}\n")
    assert pinned_keys(known, target) == [old]
    write_pinned(known, [(target, new)], replace=True)
    assert pinned_keys(known, target) == [new]
    assert known.read_text().splitlines()[0] == f"keep.example {old.key_type} {old.base64}"


# --- failures during the run -------------------------------------------------------------------


def long_run(tmp_path, farm, mp_spdz, program_cache, parties, **kw):
    """Trusted hosts and a staged run long enough (about a second) to be caught running."""
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, parties)
    trust_hosts(inventory, echo=lambda line: None)
    cfg = small_config(tmp_path, program_cache, parties=parties, program="reference",
                       clients=300_000)
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work", **kw)
    return fakes, cluster, program


def run_in_background(cluster, program):
    """Start a run in a thread; its HostGroupError lands in ``outcome["error"]``."""
    outcome: dict = {}

    def target() -> None:
        try:
            cluster.run(program, timeout=120)
        except HostGroupError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


@pytest.mark.mpspdz
def test_a_host_whose_party_dies_stops_the_group(tmp_path, farm, mp_spdz, program_cache):
    fakes, cluster, program = long_run(tmp_path, farm, mp_spdz, program_cache,
                                                3)
    thread, outcome = run_in_background(cluster, program)
    victim, seen_files = None, set()
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        for pid, name in processes_under(fakes[1].workdir):
            if name == "semi2k-party.x":
                victim = pid
                remote = Path(os.readlink(f"/proc/{pid}/cwd"))
                seen_files = {str(p.relative_to(remote)) for p in remote.rglob("*")}
        time.sleep(0.002)
    assert victim, "party 1 never started"
    os.kill(victim, signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive()
    err = outcome.get("error")
    assert err is not None, "the run survived a killed party"
    assert "p1" in [r.host.name for r in err.failed]
    # The culprit comes first; the others only report that they lost a peer.
    assert str(err).startswith(f"p1 (root@127.0.0.1:{fakes[1].port}) was killed by SIGKILL")
    assert wait_no_processes(farm.root) == []  # no party, shell or setsid left on any host
    assert remote_dirs(fakes) == []
    # What p1 had been given: its own key and no one else's, and party 0's input stayed there.
    assert "Player-Data/P1.key" in seen_files and "Player-Data/P0.key" not in seen_files
    assert not any("Input-P0" in f for f in seen_files)


@pytest.mark.mpspdz
def test_a_host_that_vanishes_mid_run_is_named(tmp_path, farm, mp_spdz, program_cache):
    fakes, cluster, program = long_run(tmp_path, farm, mp_spdz, program_cache,
                                                3, connect_options=FAST)
    thread, outcome = run_in_background(cluster, program)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            name == "semi2k-party.x" for _, name in processes_under(fakes[1].workdir)):
        time.sleep(0.002)
    leftover = remote_dirs([fakes[1]])
    assert fakes[1].proc is not None
    # The machine goes away: its sshd, every session and the party, all at once.
    # Frozen first, so that no part of it can report the others' deaths.
    sshd = fakes[1].proc.pid
    doomed = [sshd, *descendants(sshd)]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in doomed:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    thread.join(60)
    assert not thread.is_alive()
    err = outcome.get("error")
    assert err is not None, "the run survived a vanished host"
    lost = [r for r in err.failed if r.host.name == "p1"]
    assert lost and isinstance(lost[0].error, ConnectionLost)
    message = str(err)
    assert message.startswith(f"p1 (root@127.0.0.1:{fakes[1].port}): the SSH connection was "
                              "lost")
    # Nobody can clean up a vanished host: the error says what may be left there.
    assert f"remove {leftover[0]} there" in message
    assert wait_no_processes(farm.root) == []
    assert remote_dirs([fakes[0], fakes[2]]) == []


@pytest.mark.mpspdz
def test_timeout_stops_every_host(tmp_path, farm, mp_spdz, program_cache):
    fakes, cluster, program = long_run(tmp_path, farm, mp_spdz, program_cache,
                                                2)
    started = time.monotonic()
    with pytest.raises(HostGroupError, match=r"timed out after 0.2 s waiting for p0 \(root@"
                                             r".*p1 \(root@.*stopped all parties") as info:
        cluster.run(program, timeout=0.2)
    assert time.monotonic() - started < 20
    assert all(r.stopped for r in info.value.results) and info.value.failed == []
    assert wait_no_processes(farm.root) == []
    assert remote_dirs(fakes) == []


@pytest.mark.mpspdz
def test_ctrl_c_leaves_nothing_running(tmp_path, farm, mp_spdz, program_cache):
    fakes, cluster, program = long_run(tmp_path, farm, mp_spdz, program_cache,
                                                2)

    def interrupt_once_running() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(name == "semi2k-party.x" for _, name in processes_under(farm.root)):
                os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, to the main thread
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=interrupt_once_running)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            cluster.run(program, timeout=120)
    finally:
        watcher.join()
        signal.signal(signal.SIGINT, previous)
    assert wait_no_processes(farm.root) == []
    assert remote_dirs(fakes) == []


@pytest.mark.mpspdz
def test_missing_remote_mp_spdz_is_named_with_the_fix(tmp_path, farm, mp_spdz, program_cache):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2,
                                      p1={"mp_spdz": str(tmp_path / "nowhere")})
    trust_hosts(inventory, echo=lambda line: None)
    # The data owner's text, written here: the hosts are first reached by run.
    cfg = small_config(tmp_path, program_cache, parties=2, input_mode="party")
    cluster, program, _ = staged(mp_spdz, cfg, inventory, tmp_path / "work")
    with pytest.raises(HostGroupError) as info:
        cluster.run(program, timeout=60)
    message = str(info.value)
    assert f"p1 (root@127.0.0.1:{fakes[1].port})" in message
    assert f"{tmp_path / 'nowhere'}/semi2k-party.x is missing" in message
    assert "ltm mpspdz install" in message and "'mp_spdz'" in message
    assert isinstance(info.value.failed[0].error, MpSpdzError)
    assert remote_dirs(fakes) == []  # p0's directory, already made, was removed again


@pytest.mark.mpspdz
def test_local_program_on_a_host_without_the_harness_says_to_set_it_up(tmp_path, farm,
                                                                       mp_spdz,
                                                                       program_cache):
    # The fake hosts log in as root, whose home has no venv of `ltm hosts setup`.
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2, harness=False)
    trust_hosts(inventory, echo=lambda line: None)
    cfg = small_config(tmp_path, program_cache, parties=2, program="local", hosts=inventory)
    with pytest.raises(HostGroupError) as info:
        run(cfg)
    message = str(info.value)
    assert f"p0 (root@127.0.0.1:{fakes[0].port}): the harness is not installed" in message
    assert "run `ltm hosts setup` first" in message and "(no party was started)" in message
    assert remote_dirs(fakes) == []


@pytest.mark.mpspdz
def test_a_host_without_room_for_its_shares_is_refused_before_any_upload(tmp_path, farm,
                                                                         mp_spdz,
                                                                         program_cache):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2)
    trust_hosts(inventory, echo=lambda line: None)
    small = fakes[1].workdir
    small.mkdir(parents=True)
    # mode 0700, as a workdir must be (a tmpfs is 1777 by default)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(small)],
                   check=True)
    try:
        # 40000 clients x d = 4 x 8 bytes: about 1.3 MB of shares for each server, whose
        # agent writes its share file whole where its party is not fed (no launch)
        cfg = small_config(tmp_path, program_cache, parties=2, clients=40_000)
        with pytest.raises(HostGroupError) as info:
            staged(mp_spdz, cfg, inventory, tmp_path / "work")
        message = str(info.value)
        assert f"p1 (root@127.0.0.1:{fakes[1].port}): only 1.0 MiB free under {small}" in message
        assert "'workdir'" in message and "(no party was started)" in message
        assert list(small.iterdir()) == []  # nothing uploaded, its directory removed again
    finally:
        subprocess.run(["umount", str(small)], check=False)
    assert remote_dirs(fakes) == []


# --- connecting: retries, and what is never retried --------------------------------------------

def _pin(known: Path, fake: FakeHost) -> None:
    write_pinned(known, [(f"[127.0.0.1]:{fake.port}", _server_key(fake))], replace=False)


def test_connection_refused_is_retried_until_sshd_answers(tmp_path, farm, mp_spdz):
    late = farm.add("late", start=False)
    known = tmp_path / "known_hosts"
    _pin(known, late)
    timer = threading.Timer(0.5, late.start, kwargs={"wait": False})
    timer.start()
    try:
        started = time.monotonic()
        client = connect(late.as_host(farm.client_key, mp_spdz.root), known,
                         options=ConnectOptions(timeout=5, attempts=6, backoff=0.2))
    finally:
        timer.cancel()
    client.close()
    assert time.monotonic() - started >= 0.5


def test_a_closed_port_fails_after_the_retries(tmp_path, farm, mp_spdz):
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = Host(name="gone", ssh_host="127.0.0.1", ssh_port=free_port(), user="root",
                key=str(farm.client_key), mpc_host="127.0.0.1", mp_spdz=str(mp_spdz.root))
    sleeps: list[float] = []
    with pytest.raises(SshConnectError, match=r"gone \(root@127\.0\.0\.1:\d+\): cannot connect"
                                              r".*gave up after 3 attempts"):
        connect(host, known, options=ConnectOptions(timeout=2, attempts=3, backoff=0.1),
                sleep=sleeps.append)
    assert sleeps == [0.1, 0.2]


def test_bad_login_and_unknown_key_are_not_retried(tmp_path, farm, mp_spdz):
    fake = farm.add("p0")
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = fake.as_host(farm.client_key, mp_spdz.root)
    sleeps: list[float] = []
    with pytest.raises(HostKeyError, match=r"not pinned .* run `ltm hosts trust INVENTORY`"):
        connect(host, known, options=ConnectOptions(attempts=4), sleep=sleeps.append)
    _pin(known, fake)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    with pytest.raises(SshConnectError, match="login refused.*'user' and 'key'"):
        connect(fake.as_host(stranger, mp_spdz.root), known, options=ConnectOptions(attempts=4),
                sleep=sleeps.append)
    assert sleeps == []
    with pytest.raises(HostKeyError, match="does not exist.*ltm hosts trust"):
        connect(host, tmp_path / "missing_known_hosts")


# --- the command line ------------------------------------------------------------------------

def test_cli_hosts_trust_and_check(tmp_path, farm, mp_spdz, capsys):
    inventory, fakes = make_inventory(tmp_path, farm, mp_spdz.root, 2)
    assert main(["hosts", "trust", str(inventory)]) == 1  # cannot ask: stdin is no terminal
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: cannot ask for confirmation") and err.count("\n") == 1
    assert not load_inventory(inventory).known_hosts.exists()

    assert main(["hosts", "trust", str(inventory), "--yes"]) == 0
    out = capsys.readouterr().out
    assert all(fingerprint_by_openssh(f) in out for f in fakes)
    assert "Pinned 2 host key(s)" in out

    assert main(["hosts", "check", str(inventory)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"ok: MP-SPDZ {mp_spdz.version} at {mp_spdz.root}") == 2

    fakes[0].stop()
    fakes[0].new_key()
    fakes[0].start()
    assert main(["hosts", "trust", str(inventory), "--yes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: SSH host key CHANGED: p0 (root@127.0.0.1:")
    assert err.count("\n") == 1
    assert main(["hosts", "check", str(inventory)]) == 1
    assert f"p0 (root@127.0.0.1:{fakes[0].port}): FAILED: its SSH host key CHANGED" \
        in capsys.readouterr().out
    assert main(["hosts", "trust", str(inventory), "--yes", "--replace"]) == 0
    assert "(CHANGED, replaced)" in capsys.readouterr().out

    assert main(["hosts", "trust", str(tmp_path / "absent.toml"), "--yes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ltm: error: ") and "no such hosts inventory" in err

