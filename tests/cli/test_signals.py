"""SIGTERM and SIGHUP stop ``ltm`` exactly as Ctrl-C does, at every phase.

Each case starts a real ``python -m harness`` process, waits (by polling the
file system and ``/proc``, never by sleeping blindly) until it is in the phase
under test, sends the signal, and then looks for what it must not leave: a
process working anywhere under the test's directories, a partial output
directory, a sweep's ``.work``, a lock file, a remote working directory, or an
install's scratch directory.
"""

from __future__ import annotations

import http.server
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _buffers import buffers_held, left_in_shm, shm_entries
from _sshd import SshFarm, mpc_base_port, processes_under, write_inventory_file

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_PHASE_SECONDS = 120.0


def ltm(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT,
                            env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def running(root: Path, name: str) -> Callable[[], bool]:
    return lambda: any(n == name for _, n in processes_under(root))


def compiling(cache: Path) -> Callable[[], bool]:
    # The compiler is `python compile.py` working in a staging directory of the cache.
    return lambda: any(n.startswith("python") for _, n in processes_under(cache))


def tree(root: Path) -> list[Path]:
    """Everything under ``root``; os.walk skips what vanishes while it looks."""
    return [Path(d) / name for d, dirs, files in os.walk(root) for name in dirs + files]


def inputs_appear(root: Path) -> Callable[[], bool]:
    # Party 0's input file (reference) or a server's share file (fast) is being written.
    names = ("Input-P0-0", "Transactions-P1.data")
    return lambda: any(p.name in names for p in tree(root))


def signal_in_phase(proc: subprocess.Popen, reached: Callable[[], bool], sig: int,
                    before: Callable[[], None] | None = None) -> str:
    """Send ``sig`` once ``reached()`` (and ``before()``); return what the process printed."""
    deadline = time.monotonic() + _PHASE_SECONDS
    while not reached():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ltm ended (status {proc.returncode}) before the phase:\n{out}{err}")
        assert time.monotonic() < deadline, "the phase was never reached"
        time.sleep(0.005)
    if before is not None:
        before()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out + err
    assert err.strip().splitlines()[-1] == f"ltm: interrupted by {signal.Signals(sig).name}"
    assert "Traceback" not in err
    return out + err


def assert_nothing_left(*roots: Path) -> None:
    deadline = time.monotonic() + 5  # killed process groups may take a moment to be reaped
    while any(processes_under(r) for r in roots) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [p for r in roots for p in processes_under(r)] == []
    leftovers = [p for r in roots for p in tree(r)
                 if ".partial-" in p.name or p.name in (".work", "work")
                 or p.name.endswith(".lock") and p.parent.name != "programs"
                 or ".install-" in p.name]
    assert leftovers == []


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory, mp_spdz):
    """XDG_CACHE_HOME whose program cache already holds the runs' programs."""
    home = tmp_path_factory.mktemp("xdg-cache")
    subprocess.run([sys.executable, "-m", "harness", "run", *SMALL_RUN, "--program",
                    "reference", "--clients", "2000", "--out", str(home.parent / "warm")],
                   cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(home)},
                   check=True, capture_output=True, timeout=300)
    return home


# Long enough in each phase (about a second) to be caught there, small enough to be cheap.
SMALL_RUN = ["--rows", "10", "--dim", "10", "--noise", "none", "--seed", "1"]
LONG_RUN = [*SMALL_RUN, "--clients", "150000"]


@pytest.mark.mpspdz
@pytest.mark.parametrize(("phase", "sig"), [
    *[(phase, sig) for phase in ("prepare", "mpc") for sig in SIGNALS],
    ("mpc", signal.SIGINT),  # the behaviour the others must match
], ids=lambda v: v if isinstance(v, str) else signal.Signals(v).name)
def test_run_stops_cleanly(tmp_path, warm_cache, sig, phase):
    out = tmp_path / "out"
    proc = ltm(["run", *LONG_RUN, "--program", "reference", "--out", str(out)],
               {"XDG_CACHE_HOME": str(warm_cache)})
    reached = inputs_appear(tmp_path) if phase == "prepare" \
        else running(tmp_path, "semi2k-party.x")
    signal_in_phase(proc, reached, sig)
    assert not out.exists()
    assert_nothing_left(tmp_path)


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries ``marker`` (a run's and its children)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker.encode() in fh.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.mpspdz
@pytest.mark.parametrize("sig", [*SIGNALS, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_a_streamed_run_stops_every_client_worker_and_server(tmp_path, warm_cache, sig):
    out = tmp_path / "out"
    marker = f"LTM_TEST_MARK={tmp_path.name}-{int(sig)}"
    key, value = marker.split("=", 1)
    proc = ltm(["run", *SMALL_RUN, "--clients", "20000000", "--program", "local",
                "--parties", "3", "--out", str(out)],
               {"XDG_CACHE_HOME": str(warm_cache), key: value})
    shm_before = shm_entries()
    tree: list[int] = []

    def streaming() -> bool:  # the channel buffers are mapped and every process is up
        tree[:] = marked(marker)
        return any(name == "ltm-channel-w1-P2" for _, name, _ in buffers_held(tree)) \
            and len(tree) >= 7  # ltm, the fork server, 2 workers, 3 servers

    signal_in_phase(proc, streaming, sig)
    deadline = time.monotonic() + 10
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marked(marker) == []
    assert not buffers_held(tree)
    assert left_in_shm(shm_before) == []
    assert not out.exists()
    assert_nothing_left(tmp_path)


@pytest.mark.mpspdz
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_compile_stops_cleanly(tmp_path, mp_spdz, sig):
    cache = tmp_path / "cache"
    proc = ltm(["run", *SMALL_RUN, "--clients", "2000", "--out", str(tmp_path / "out")],
               {"XDG_CACHE_HOME": str(cache)})
    signal_in_phase(proc, compiling(cache), sig)
    programs = cache / "ltm-harness" / "programs"
    # Neither a half-compiled entry nor its staging directory is left in the cache.
    assert [p.name for p in programs.iterdir() if not p.name.endswith(".lock")] == []
    assert_nothing_left(tmp_path)


@pytest.mark.mpspdz
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_sweep_stops_cleanly_and_keeps_finished_repetitions(tmp_path, warm_cache, sig):
    out = tmp_path / "sweep"
    proc = ltm(["reproduce", "table4", "--scale", "0.1", "--repeat", "1", "--no-progress",
                "--program", "reference", "--out", str(out)],
               {"XDG_CACHE_HOME": str(warm_cache)})
    err = signal_in_phase(proc, running(out, "semi2k-party.x"), sig)
    assert "Run the same command again to resume" in err
    assert (out / "sweep.json").is_file()
    assert_nothing_left(tmp_path)


@pytest.mark.mpspdz
@pytest.mark.root
@pytest.mark.skipif(not IS_ROOT, reason="the fake hosts are sshd servers logged into as root")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_run_over_ssh_stops_every_host(tmp_path, warm_cache, mp_spdz, sig):
    farm = SshFarm(tmp_path / "farm")
    try:
        fakes = [farm.add(f"p{i}") for i in range(2)]
        hosts = [f.as_host(farm.client_key, mp_spdz.root) for f in fakes]
        inventory = write_inventory_file(tmp_path / "hosts.toml", hosts, mpc_base_port(2))
        trust = subprocess.run([sys.executable, "-m", "harness", "hosts", "trust", "--yes",
                                str(inventory)], cwd=ROOT, capture_output=True, text=True,
                               timeout=60)
        assert trust.returncode == 0, trust.stderr
        out = tmp_path / "out"
        proc = ltm(["run", *LONG_RUN, "--program", "reference", "--hosts", str(inventory),
                    "--out", str(out)], {"XDG_CACHE_HOME": str(warm_cache)})
        remote_private = []

        def remote_modes() -> None:
            # SSH staging on the hosts: the working directory private, secrets 0600.
            for fake in fakes:
                for d in fake.workdir.iterdir():
                    remote_private.append(stat.S_IMODE(d.stat().st_mode) == 0o700)
                    remote_private.extend(
                        stat.S_IMODE(f.stat().st_mode) == 0o600 for f in d.rglob("*")
                        if f.name.endswith((".key", ".data")) or f.name.startswith("Input-P"))

        signal_in_phase(proc, running(farm.root, "semi2k-party.x"), sig, remote_modes)
        assert len(remote_private) >= 5 and all(remote_private)  # 2 dirs, 2 keys, the input
        assert [p for f in fakes if f.workdir.exists() for p in f.workdir.iterdir()] == []
        assert not out.exists()
        assert_nothing_left(tmp_path / "out", farm.root / "p0" / "remote",
                            farm.root / "p1" / "remote")
    finally:
        farm.close()


class _Trickle(http.server.BaseHTTPRequestHandler):
    """A download that starts and never finishes: the install is caught mid-download."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 30))
        self.end_headers()
        try:
            while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                self.wfile.write(b"\0" * 1024)
                time.sleep(0.05)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_mpspdz_install_removes_its_scratch_directory(tmp_path, sig):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.stopping = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        prefix = tmp_path / "mp-spdz"
        url = f"http://127.0.0.1:{server.server_address[1]}/mp-spdz-0.4.2.tar.xz"
        proc = ltm(["mpspdz", "install", "--prefix", str(prefix), "--url", url], {})
        signal_in_phase(proc, lambda: any(p.name == "download.tar" for p in tree(tmp_path)),
                        sig)
    finally:
        server.stopping.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
    assert list(tmp_path.iterdir()) == []
