"""Faults met while a fed ``fast`` run streams: its disk filling, ``ltm`` killed outright,
a party stopped. Each against a real ``python -m harness`` run and its real parties."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from _sshd import processes_under

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
_PHASE_SECONDS = 120.0
# fast with its parties fed the stream (each server's share file a ring in its party's
# Persistence directory); long enough to be caught mid-stream.
FED_RUN = ["run", "--program", "fast", "--rows", "10", "--dim", "10", "--noise", "none",
           "--seed", "1"]

pytestmark = pytest.mark.mpspdz


def ltm(args: list[str], cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT,
                            env={**os.environ, "XDG_CACHE_HOME": str(cache)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, reached: Callable[[], object]) -> object:
    """What ``reached()`` returns once it is true, polled (never a blind sleep)."""
    deadline = time.monotonic() + _PHASE_SECONDS
    while not (found := reached()):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ltm ended (status {proc.returncode}) before the phase:\n{out}{err}")
        assert time.monotonic() < deadline, "the phase was never reached"
        time.sleep(0.002)
    return found


def party(root: Path, i: int) -> int | None:
    """MPC party i's live process under ``root`` (its working directory is its own)."""
    found = [pid for pid, _ in processes_under(root) if os.readlink(f"/proc/{pid}/cwd")
             .endswith(f"/work/P{i}")]
    return found[0] if found else None


def rings(root: Path) -> list[Path]:
    return [p for p in root.glob(".out.partial-*/work/P*/Persistence/Transactions-P*.data")
            if p.is_file()]


@contextmanager
def reaped(root: Path) -> Iterator[None]:
    """On the way out no process of the test's run is left under ``root``: one that has
    not ended within 10 s is killed (a stopped one too)."""
    try:
        yield
    finally:
        deadline = time.monotonic() + 10
        while processes_under(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, _ in processes_under(root):
            with suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, signal.SIGKILL)


@pytest.mark.root
@pytest.mark.skipif(not IS_ROOT, reason="mounts a small tmpfs (root)")
def test_a_disk_that_fills_while_a_fed_run_streams_is_one_line_not_sigbus(tmp_path, mp_spdz,
                                                                          program_cache):
    disk = tmp_path / "disk"
    disk.mkdir()
    # 16 MiB: the check before the run (3 MB of share files for 2 servers) holds.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(disk)],
                   check=True)
    try:
        with reaped(disk):
            proc = ltm([*FED_RUN, "--clients", "20000", "--out", str(disk / "out")],
                       program_cache)
            # Once its parties run (the check is past), something else fills the disk but
            # 1 MiB, less than each server's ring of shares (2 MiB) needs.
            wait_for(proc, lambda: party(disk, 0))
            fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
                os.posix_fallocate(fd, 0, free - (1 << 20))
            finally:
                os.close(fd)
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, out + err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        # (what is free when it is said: the other server may be reserving its own)
        assert re.fullmatch(
            r"ltm: error: server P[01]: the disk is full at .*/Persistence: the ring of "
            r"shares its MPC party reads needs 2\.0 MiB, only [01]\.\d MiB are free there; "
            r"free some space, or choose an --out on another file system", lines[0]), err
        assert "status -7" not in err and "Traceback" not in err
        # The run's staging directory, its work and share files with it, is gone.
        assert [p.name for p in disk.iterdir()] == ["filler"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_fed_run_killed_outright_leaves_shares_that_the_next_run_removes(tmp_path, mp_spdz,
                                                                          program_cache):
    out = tmp_path / "out"
    with reaped(tmp_path):
        proc = ltm([*FED_RUN, "--clients", "400000", "--sparsity", "4", "--out", str(out)],
                   program_cache)
        wait_for(proc, lambda: [p for p in rings(tmp_path) if p.stat().st_size > 0])
        proc.kill()
        proc.communicate(timeout=60)
    # What SIGKILL left: the staging directory, each party's ring of shares in it (0600).
    left = rings(tmp_path)
    assert left and all(p.stat().st_mode & 0o777 == 0o600 for p in left)
    staging = left[0].parents[3]
    rerun = subprocess.run([sys.executable, "-m", "harness", *FED_RUN, "--clients", "2000",
                            "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "XDG_CACHE_HOME": str(program_cache)},
                           timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert rerun.stderr.strip().splitlines() == [
        f"removed {staging}: the partial output of an earlier run into this --out that was "
        "killed (its work files, shares included)"]
    assert not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (out / "result.json").is_file()


def test_a_party_stopped_mid_stream_is_named(tmp_path, mp_spdz, program_cache):
    out = tmp_path / "out"
    with reaped(tmp_path):
        proc = ltm([*FED_RUN, "--clients", "400000", "--sparsity", "4", "--timeout", "15",
                    "--out", str(out)], program_cache)
        wait_for(proc, lambda: [p for p in rings(tmp_path) if p.stat().st_size > 0])
        victim = party(tmp_path, 1)
        assert victim is not None
        os.kill(victim, signal.SIGSTOP)
        began = time.monotonic()
        stdout, err = proc.communicate(timeout=120)
        assert time.monotonic() - began < 60
    assert proc.returncode == 1, stdout + err
    first = err.strip().splitlines()[0]
    assert first.startswith("ltm: error: the streamed run timed out (") and \
        "still running): party P1 was stopped (SIGSTOP) and never continued" in first, err
    assert "continue a stopped one (SIGCONT)" in first
    assert not out.exists()
