"""`ltm hosts setup | check | trust` stop within 2 seconds of SIGINT, SIGTERM or SIGHUP.

Each case starts a real ``python -m harness`` process against real sshd
servers (tests/_sshd.py), waits (by polling files, never by sleeping blindly)
until it is inside the remote work, sends the signal and measures how long the
process takes to exit. It must say which hosts finished, leave no process of
its remote commands running, and, for setup, leave every host so that the next
setup converges.

The slow remote step of setup is a stand-in MP-SPDZ whose party binary (started
once on each host by setup's check) sleeps while a flag file lies in the host's
home; its venv has a stand-in pip, so no package is installed from anywhere.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _sshd import FakeHost, SshFarm, mpc_base_port, write_inventory_file

from harness.remote._keys import ServerKey, write_pinned
from harness.stream import pid_alive

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_STOP_SECONDS = 2.0
_PHASE_SECONDS = 120.0
_SHARE = ".local/share/ltm-harness"

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="the fake hosts are sshd servers logged into as root")]


def ltm(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT,
                            env={**os.environ, "LTM_NO_INSTALL": "1"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, reached, what: str) -> None:
    deadline = time.monotonic() + _PHASE_SECONDS
    while not reached():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ltm ended (status {proc.returncode}) before {what}:\n{out}{err}")
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.01)


def interrupt(proc: subprocess.Popen, sig: int) -> tuple[str, str]:
    """Send ``sig``; assert the process exits within the limit, as interrupted; its output."""
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=_STOP_SECONDS + 10)
    finally:
        took = time.monotonic() - sent
    out, err = proc.communicate()
    assert took <= _STOP_SECONDS, f"took {took:.2f} s to stop:\n{out}{err}"
    assert proc.returncode == 128 + sig, out + err
    assert err.strip().splitlines()[-1] == f"ltm: interrupted by {signal.Signals(sig).name}"
    assert "Traceback" not in err, err
    return out, err


def commands_mentioning(text: str) -> list[str]:
    """Live processes whose command line contains ``text`` (this test's own excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(entry)):
            found.append(f"{entry}: {cmdline[:200]}")
    return found


def nothing_left_on(fake: FakeHost, pids: list[int]) -> None:
    """Neither the slow binary nor any remote command of setup still runs there."""
    assert fake.home is not None
    deadline = time.monotonic() + 5  # the host's watcher kills TERM, then KILL a second later
    while (any(pid_alive(p) for p in pids) or commands_mentioning(str(fake.home))) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if pid_alive(p)] == []
    assert commands_mentioning(str(fake.home)) == []


# --- hosts setup -----------------------------------------------------------------------

SLOW_BINARY = """#!/bin/sh
# Started once by `ltm hosts setup` to see that it runs: slow while the flag is there.
if [ -e "$HOME/slow" ]; then
    echo $$ >> "$HOME/slow.pids"
    sleep 60 & echo $! >> "$HOME/slow.pids"
    wait
fi
exit 1
"""


def fake_mpspdz(root: Path) -> Path:
    root.mkdir()
    (root / "compile.py").write_text("# stand-in\n")
    (root / "Compiler").mkdir()
    (root / "Compiler" / "__init__.py").write_text("")
    (root / "semi2k-party.x").write_text(SLOW_BINARY)
    os.chmod(root / "semi2k-party.x", 0o755)
    return root


def fake_venv(fake: FakeHost) -> None:
    """A venv whose pip installs nothing and whose ltm answers --version."""
    fake.home = fake.root / "home"
    bin_dir = fake.home / _SHARE / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pip").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "ltm").write_text("#!/bin/sh\necho ltm-harness stand-in\n")
    for name in ("pip", "ltm"):
        os.chmod(bin_dir / name, 0o755)


def slow_pids(fake: FakeHost) -> list[int]:
    assert fake.home is not None
    try:
        return [int(x) for x in (fake.home / "slow.pids").read_text().split()]
    except (OSError, ValueError):
        return []


def test_setup_stops_at_once_says_which_hosts_are_ready_and_converges_after(tmp_path):
    farm = SshFarm(tmp_path / "farm")
    try:
        fakes = []
        for name in ("p0", "p1"):
            fake = farm.add(name, start=False)
            fake_venv(fake)
            fake.start()
            fakes.append(fake)
        fast, slow = fakes
        assert slow.home is not None and fast.home is not None
        hosts = [f.as_host(farm.client_key, Path("~/.local/share/ltm-harness/mp-spdz"))
                 for f in fakes]
        inventory = write_inventory_file(tmp_path / "hosts.toml", hosts, mpc_base_port(2))
        trust = subprocess.run([sys.executable, "-m", "harness", "hosts", "trust", "--yes",
                                str(inventory)], cwd=ROOT, capture_output=True, text=True,
                               timeout=60)
        assert trust.returncode == 0, trust.stderr
        mp = fake_mpspdz(tmp_path / "mp")
        record = {f.name: f.home / _SHARE / "setup.json" for f in fakes}
        (slow.home / "slow").write_text("")

        for sig in SIGNALS:
            proc = ltm("hosts", "setup", "--yes", "--mp-spdz-dir", str(mp), str(inventory))
            # p0 is set up (its record written), p1 is inside its slow remote step.
            wait_for(proc, lambda: record["p0"].exists() and len(slow_pids(slow)) == 2,
                     "p0 ready and p1 in its slow step")
            time.sleep(0.3)  # p0's worker returns its result just after writing the record
            pids = slow_pids(slow)
            out, _ = interrupt(proc, sig)
            assert (f"setup interrupted: 1 of 2 host(s) ready (p0); stopped on p1; run `ltm "
                    f"hosts setup {inventory}` again") in out, out
            assert "FAILED" not in out, out  # the stop is no failure of p1's
            nothing_left_on(slow, pids)
            nothing_left_on(fast, [])
            assert not record["p1"].exists()  # p1 was stopped half-way: not marked ready
            (slow.home / "slow.pids").unlink()

        (slow.home / "slow").unlink()
        done = subprocess.run([sys.executable, "-m", "harness", "hosts", "setup", "--yes",
                               "--mp-spdz-dir", str(mp), str(inventory)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 host(s) ready; 1 changed." in done.stdout, done.stdout
        assert record["p1"].exists()
        again = subprocess.run([sys.executable, "-m", "harness", "hosts", "setup", "--yes",
                                "--mp-spdz-dir", str(mp), str(inventory)], cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "nothing changed (all were already set up)" in again.stdout, again.stdout
    finally:
        farm.close()


# --- hosts check and hosts trust ---------------------------------------------------------

class Silent:
    """A TCP port that accepts connections and never says anything: an SSH server that
    hangs (a host half up), so the command waits there until it is stopped."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.mark.parametrize("command", ["check", "trust"])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_check_and_trust_stop_at_once_and_say_which_hosts_answered(tmp_path, command, sig):
    farm = SshFarm(tmp_path / "farm")
    silent = Silent()
    try:
        good = farm.add("p0")
        hosts = [good.as_host(farm.client_key, Path("/nonexistent/mp-spdz")),
                 good.as_host(farm.client_key, Path("/nonexistent/mp-spdz"), name="p1",
                              ssh_port=silent.port)]
        inventory = write_inventory_file(tmp_path / "hosts.toml", hosts, mpc_base_port(2))
        known = tmp_path / "known_hosts"
        if command == "check":  # p0's key pinned; p1 never answers, so never pinned
            key_type, blob = good.host_key.with_suffix(".pub").read_text().split()[:2]
            write_pinned(known, [(f"[127.0.0.1]:{good.port}", ServerKey(key_type, blob))],
                         replace=False)
        before = known.read_bytes() if known.exists() else None
        extra = ["--yes"] if command == "trust" else []
        proc = ltm("hosts", command, *extra, str(inventory))
        wait_for(proc, silent.accepted.is_set, "the command waiting for p1")
        out, _ = interrupt(proc, sig)
        if command == "check":
            assert "p0 (root@127.0.0.1:" in out  # its own line, before p1 was reached
            assert "check interrupted: 1 of 2 host(s) checked (p0), not p1" in out, out
        else:
            assert "trust interrupted: 1 of 2 host(s) answered (p0), not p1; nothing was " \
                   "written" in out, out
        assert (known.read_bytes() if known.exists() else None) == before
    finally:
        silent.close()
        farm.close()
