"""Network emulation: namespaces, shaped links, cleanup, and real parties behind them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from _procs import zombie
from _runs import staged

import harness.engine.netns as netns
from harness.clients.seeded import SEED_BYTES
from harness.engine.cluster import LocalCluster
from harness.engine.netns import (
    PROFILES,
    NetworkEmulation,
    NetworkEmulationError,
    Profile,
    profile_for,
    remove_stale,
    tbf_args,
)
from harness.engine.parse import parse_output
from harness.engine.process import Command, run_group
from harness.errors import InputError, PartyError, TamperDetectedError
from harness.experiments import RunConfig, run

IS_ROOT = os.geteuid() == 0


def needs_root(test):
    """Marked ``root``, and skipped with a reason when not root (CI runs as root)."""
    skip = pytest.mark.skipif(not IS_ROOT, reason="network namespaces need root")
    return pytest.mark.root(skip(test))


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _ours(net: NetworkEmulation) -> list[str]:
    return sorted(ns for ns in _namespaces() if ns.startswith(net.prefix + "-"))


def _qdisc(ns: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True,
                          text=True, check=True).stdout


# --- no root needed ---------------------------------------------------------------------

def test_unknown_profile_lists_the_profiles(tmp_path):
    with pytest.raises(InputError) as err:
        LocalCluster(object(), 2, tmp_path / "w", network="t3.huge")  # type: ignore[arg-type]
    msg = str(err.value)
    assert "t3.huge" in msg and "none" in msg and "t3.large" in msg and "\n" not in msg
    assert not (tmp_path / "w").exists()


def test_without_root_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(InputError) as err:
        LocalCluster(object(), 2, tmp_path / "w", network="t3.large")  # type: ignore[arg-type]
    msg = str(err.value)
    assert "needs root" in msg and "--network" in msg and "\n" not in msg
    assert not (tmp_path / "w").exists()  # nothing was prepared
    with pytest.raises(InputError, match="needs root"):
        NetworkEmulation("none", 2).__enter__()


def test_missing_iproute2_names_the_package(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    monkeypatch.setattr(netns, "_SBIN", ())
    with pytest.raises(InputError, match=r"`ip` command from iproute2.*apt-get install iproute2"):
        netns.check_requirements()


def test_profiles_and_their_tbf_parameters():
    assert {"none", "t3.large"} <= set(PROFILES)
    assert tbf_args(PROFILES["none"]) == []
    t3 = PROFILES["t3.large"]
    assert (t3.rate_mbit, t3.peak_mbit) == (512, 5000)  # documented baseline and burst
    args = tbf_args(t3)
    assert args[:3] == ["tbf", "rate", "512000000bit"]
    assert args[args.index("peakrate") + 1] == "5000000000bit"
    assert tbf_args(PROFILES["t3.large-baseline"])[:3] == ["tbf", "rate", "512000000bit"]
    assert "peakrate" not in tbf_args(PROFILES["t3.large-baseline"])
    assert profile_for(t3) is t3
    with pytest.raises(ValueError, match="peak_mbit must exceed"):
        Profile("x", rate_mbit=10, peak_mbit=5)
    with pytest.raises(ValueError, match="bucket_bytes"):
        Profile("x", rate_mbit=10, bucket_bytes=1000)


# --- namespaces (root) --------------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("profile", ["t3.large", "none"])
def test_namespaces_links_and_shaping_then_all_removed(profile):
    net = NetworkEmulation(profile, 3)
    with net:
        assert _ours(net) == sorted([net.switch] + [net.namespace(i) for i in range(3)])
        for i in range(3):
            addr = subprocess.run(net.wrap(i, ["ip", "-br", "addr"]), capture_output=True,
                                  text=True, check=True).stdout
            assert f"{net.address(i)}/24" in addr and "127.0.0.1" in addr  # lo is up
            shaped = [_qdisc(net.namespace(i), "eth0"), _qdisc(net.switch, f"p{i}")]
            for text in shaped:  # both directions of the party's link
                if profile == "t3.large":
                    assert "tbf" in text and "rate 512Mbit" in text
                    assert "peakrate 5Gbit" in text and "burst 4096Mb" in text
                else:
                    assert "tbf" not in text
        # party 0 reaches party 2 through the bridge
        probe = (f"import socket,sys\ntry:\n socket.create_connection(('{net.address(2)}', 9),"
                 " timeout=3)\nexcept ConnectionRefusedError:\n sys.exit(0)\nsys.exit(1)\n")
        assert subprocess.run(net.wrap(0, [sys.executable, "-c", probe])).returncode == 0
    assert _ours(net) == []


@needs_root
def test_ip_netns_exec_keeps_the_pid_so_group_kill_reaches_the_party():
    with NetworkEmulation("none", 2) as net:
        proc = subprocess.Popen(net.wrap(1, ["sleep", "30"]), start_new_session=True)
        try:
            deadline = time.monotonic() + 5
            while os.path.basename(os.readlink(f"/proc/{proc.pid}/exe")) != "sleep":
                assert time.monotonic() < deadline, "ip netns exec did not exec"
                time.sleep(0.01)
            assert os.readlink(f"/proc/{proc.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            ident = subprocess.run(["ip", "netns", "identify", str(proc.pid)],
                                   capture_output=True, text=True, check=True).stdout.strip()
            assert ident == net.namespace(1)
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=5) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@needs_root
@pytest.mark.parametrize("failure", ["party exits 3", "timeout"])
def test_removed_after_failing_party_or_timeout(tmp_path, failure):
    net = NetworkEmulation("t3.large", 2)
    with pytest.raises(PartyError) as err, net:
        first = ["sh", "-c", "exit 3"] if failure == "party exits 3" else ["sleep", "30"]
        commands = [Command("P0", net.wrap(0, first), tmp_path),
                    Command("P1", net.wrap(1, ["sleep", "30"]), tmp_path)]
        run_group(commands, timeout=0.5)
    assert ("exited with status 3" if failure != "timeout" else "timed out") in str(err.value)
    assert _ours(net) == []
    assert subprocess.run(["pgrep", "-f", net.prefix], capture_output=True).returncode == 1


@needs_root
@pytest.mark.parametrize("exc", [NetworkEmulationError("boom"), KeyboardInterrupt()])
def test_removed_when_creation_fails_half_way(monkeypatch, exc):
    real_run, calls = netns._run, []

    def flaky(argv):
        calls.append(argv)
        if len(calls) == 9:  # after the switch and one party namespace exist
            raise exc
        return real_run(argv)

    monkeypatch.setattr(netns, "_run", flaky)
    net = NetworkEmulation("t3.large", 3)
    with pytest.raises(type(exc)), net:
        pytest.fail("entered a half-built network")
    monkeypatch.undo()
    assert _ours(net) == []


@needs_root
def test_stale_namespaces_of_dead_processes_are_removed():
    """Gone: reaped, or exited and not reaped yet (a zombie holds nothing)."""
    dead, unreaped = subprocess.Popen(["true"]), zombie()
    dead.wait()
    stale = [f"ltm-{dead.pid}-abc123-p0", f"ltm-{unreaped.pid}-abc123-p0"]
    live = f"ltm-{os.getpid()}-abc123-p0"
    for ns in (*stale, live):
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        assert set(stale) <= set(remove_stale())
        names = _namespaces()
        assert not set(stale) & set(names) and live in names
    finally:
        unreaped.wait()
        for ns in (*stale, live):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


@needs_root
def test_ip_errors_carry_their_stderr():
    with pytest.raises(NetworkEmulationError, match=r"ip netns delete ltm-nonexistent.*failed"):
        netns._run(["ip", "netns", "delete", "ltm-nonexistent"])


# --- shaping actually limits throughput ----------------------------------------------------

_RECEIVER = """
import socket, time
s = socket.socket()
s.bind(("0.0.0.0", 7000)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); t = time.monotonic(); n = 0
while (b := c.recv(1 << 16)):
    n += len(b)
print(n, time.monotonic() - t, flush=True)
"""
_SENDER = """
import socket, sys
c = socket.create_connection((sys.argv[1], 7000)); c.sendall(bytes(int(sys.argv[2]))); c.close()
"""


def _transfer(net: NetworkEmulation, size: int) -> float:
    """Seconds to move ``size`` bytes from party 0 to party 1, measured by the receiver."""
    with subprocess.Popen(net.wrap(1, [sys.executable, "-c", _RECEIVER]),
                          stdout=subprocess.PIPE, text=True) as recv:
        try:
            assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
            subprocess.run(net.wrap(0, [sys.executable, "-c", _SENDER, net.address(1),
                                        str(size)]), check=True, timeout=20)
            got, seconds = recv.stdout.readline().split()
            assert int(got) == size
            return float(seconds)
        finally:
            recv.kill()


@needs_root
def test_shaping_limits_throughput():
    size, mbit = 4_000_000, 40
    with NetworkEmulation(Profile("test-40mbit", rate_mbit=mbit), 2) as net:
        seconds = _transfer(net, size)
    floor = (size - netns.MIN_BUCKET) * 8 / (mbit * 1e6)  # the bucket passes at once
    assert seconds >= 0.8 * floor, f"{size * 8 / seconds / 1e6:.1f} Mbit/s at {mbit} Mbit/s"


@needs_root
def test_credits_burst_at_peak_then_fall_back_to_the_baseline():
    # 1 MB of credits at 20 -> 80 Mbit/s: ~1.33 MB at 80 Mbit/s, the rest at 20 Mbit/s.
    size, rate, peak, bucket = 3_000_000, 20e6, 80e6, 1_000_000
    profile = Profile("test-burst", rate_mbit=rate / 1e6, peak_mbit=peak / 1e6,
                      bucket_bytes=bucket)
    with NetworkEmulation(profile, 2) as net:
        seconds = _transfer(net, size)
    at_peak = bucket * peak / (peak - rate)
    model = (at_peak * 8 / peak) + (size - at_peak) * 8 / rate
    assert seconds >= 0.8 * model, f"{seconds:.2f} s, model {model:.2f} s"
    assert seconds < size * 8 / rate, "the credits were not used"


# --- real parties behind the emulated network ------------------------------------------------

@pytest.mark.mpspdz
@needs_root
@pytest.mark.parametrize("parties", [2, 3])
def test_mpspdz_parties_verify_over_t3_large(tmp_path, mp_spdz, program_cache, parties):
    cfg = RunConfig(out=tmp_path / "out", parties=parties, clients=300, rows=5, dim=2,
                    sparsity=2, noise="none", seed=11, cache_dir=program_cache, timeout=60,
                    network="t3.large")
    s = staged(mp_spdz, cfg, tmp_path / "work")
    cluster = s.cluster
    before = set(_namespaces())
    with cluster.session():  # one network for the upload and the MPC
        runs = cluster.run(s.program, timeout=cfg.timeout)
    assert s.prepared.upload is not None and sorted(s.prepared.upload) == list(range(parties))
    assert not cluster.reuses_inputs  # each run through the network sends anew
    m, d = s.work.sketch.m, s.work.d
    revealed = parse_output("P0", runs[0].completed.stdout, m * d).reshape(m, d)
    assert np.array_equal(revealed, s.prepared.expected)
    assert all(r.stats["global_data_sent_mb"] > 0 for r in runs)
    hosts = (tmp_path / "work" / "ip-file").read_text().split()
    assert hosts == [f"{netns.SUBNET}.{i + 1}:{5000 + i}" for i in range(parties)]
    assert set(_namespaces()) <= before  # nothing left behind


@pytest.mark.mpspdz
@needs_root
def test_ltm_run_with_network_profile(tmp_path, mp_spdz, program_cache):
    result = run(RunConfig(out=tmp_path / "out", parties=2, clients=300, rows=5, dim=2,
                           sparsity=2, noise="none", seed=11, cache_dir=program_cache,
                           timeout=60, network="t3.large"))
    assert result["verification"]["ok"] and result["parameters"]["network"] == "t3.large"
    assert result["upload_measured"] and result["timings"]["client_upload_s"] > 0
    assert not any(ns.startswith(f"ltm-{os.getpid()}-") for ns in _namespaces())


# 20 Mbit/s: 2.5 MB/s, so 1-2 MB per server takes most of a second, well above the
# handshake and the receivers' start; the bucket (128 KiB) passes at once.
_SLOW = Profile("test-20mbit", rate_mbit=20)


@pytest.mark.mpspdz
@needs_root
@pytest.mark.parametrize("program", ["reference", "fast"])
def test_upload_is_measured_through_the_shaped_links(tmp_path, mp_spdz, program_cache,
                                                     monkeypatch, program):
    """fast's and reference's shares cross chunk by chunk while the clients make them
    (streamed), at the link's rate."""
    monkeypatch.setitem(netns.PROFILES, _SLOW.name, _SLOW)
    cfg = RunConfig(out=tmp_path / "out", parties=2, clients=12_000, rows=10, dim=5,
                    sparsity=2, noise="gaussian", seed=4, cache_dir=program_cache,
                    timeout=60, network=_SLOW.name, program=program, input_mode="shares")
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"]  # bit for bit, after crossing the network
    assert result["upload_measured"]
    t = result["timings"]
    parties = result["parties"]
    assert t["client_upload_s"] == max(p["upload_s"] for p in parties) > 0
    for p in parties:
        sent = p["upload_bytes_sent"]
        assert sent >= result["client_upload_bytes"][p["party"]]  # + padding and header
        floor = (sent - netns.MIN_BUCKET) * 8 / (_SLOW.rate_mbit * 1e6)
        # at the link's rate, give or take TCP/TLS overhead and a loaded machine; the
        # server's clock starts when it first reads, which a loaded machine may delay by
        # some milliseconds while the first bytes already cross
        assert floor - 0.05 <= p["upload_s"] <= 2 * floor + 1.0, (p["upload_s"], floor)
    # The upload ran inside the stream (prepare_s), not after it.
    assert t["client_upload_s"] == t["stream_upload_s"]
    assert result["t_end_to_end_s"] == pytest.approx(t["prepare_s"] + result["t_mpc_s"])
    assert not any(ns.startswith(f"ltm-{os.getpid()}-") for ns in _namespaces())


@pytest.mark.mpspdz
@needs_root
@pytest.mark.parametrize("program", ["reference", "fast", "local"])
def test_seeded_upload_through_the_network(tmp_path, mp_spdz, program_cache, program):
    n = 3000
    cfg = RunConfig(out=tmp_path / "out", parties=3, clients=n, rows=10, dim=3,
                    sparsity=2, noise="gaussian", epsilon=5.0, seed=5,
                    cache_dir=program_cache, timeout=60, network="t3.large-baseline",
                    program=program, sharing="seeded", input_mode="shares")
    assert cfg.validate().streams
    result = run(cfg)
    assert result["verification"]["ok"] and result["upload_measured"]
    sent = [p["upload_bytes_sent"] for p in result["parties"]]
    # each server: the full words (s * d = 6) of the third of the clients that lead with
    # its component, never padding rows, and a seed for each of the others
    words = n // 3 * 8 * 6 + (n - n // 3) * SEED_BYTES
    assert result["client_upload_bytes"] == [words] * 3
    t = result["timings"]
    assert t["client_upload_s"] == max(p["upload_s"] for p in result["parties"]) > 0
    # the same words in frames; expanded and uploaded inside the stream
    assert all(words < x <= words + 2 * 1024 for x in sent)
    assert "expand_s" not in t and t["stream_expand_s"] > 0
    mpc = max(p.get("mpc_time_s") or p["time_s"] for p in result["parties"])
    assert result["t_end_to_end_s"] == pytest.approx(t["prepare_s"] + mpc)


@pytest.mark.mpspdz
@needs_root
@pytest.mark.parametrize("program", ["reference", "fast"])
def test_the_data_owners_text_streams_under_a_network(tmp_path, mp_spdz, program_cache,
                                                      program):
    # --input party under --network: the data owner writes party 0's input a chunk at a
    # time, as on the loopback (whole files, held in memory, before); nothing crosses the
    # clients' links, and the MPC runs through the emulated network.
    cfg = RunConfig(out=tmp_path / "out", parties=2, clients=3000, rows=10, dim=3,
                    sparsity=2, seed=5, calibration="analytic", cache_dir=program_cache,
                    timeout=60, network="t3.large", program=program, input_mode="party")
    assert cfg.validate().route.sink == "owner"
    result = run(cfg)
    assert result["verification"]["ok"] and result["parameters"]["network"] == "t3.large"
    assert result["parameters"]["layout"]["kind"] == "party-text-per-chunk"
    assert result["client_upload_bytes"] == [8 * 3000 * 2 * 3, 0]
    assert not result["upload_measured"] and "client_upload_s" not in result["timings"]
    assert not any(ns.startswith(f"ltm-{os.getpid()}-") for ns in _namespaces())


@pytest.mark.mpspdz
@needs_root
def test_tampering_after_the_upload_is_detected(tmp_path, mp_spdz, program_cache):
    cfg = RunConfig(out=tmp_path / "out", parties=3, clients=2000, rows=10, dim=3,
                    sparsity=2, noise="none", seed=5, cache_dir=program_cache, timeout=60,
                    network="none", protocol="ps-rep-ring", tamper=1)
    with pytest.raises(TamperDetectedError, match="ps-rep-ring"):
        run(cfg)
    assert not (tmp_path / "out").exists()
