"""Whether a process still runs, the one check behind every sweep of what dead runs left,
and whether it is stopped, which a stream that times out names."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _procs import state, zombie

from harness.stream import Processes, StreamError, pid_alive, pid_stopped, sweep_stale_buffers


def test_a_running_process_is_alive_and_a_reaped_one_is_not():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(proc.pid)
        assert pid_alive(os.getpid())
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)


def test_an_exited_process_not_yet_reaped_is_gone():
    proc = zombie()
    try:
        assert state(proc.pid) == "Z"  # still in the process table
        assert not pid_alive(proc.pid)
    finally:
        proc.wait()


@pytest.mark.parametrize("pid", [0, -1])
def test_a_pid_naming_no_single_process_is_not_alive(pid):
    # os.kill(0, 0) and os.kill(-1, 0) succeed: they signal a group, or every process.
    assert not pid_alive(pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_another_users_process_is_alive():
    """Signalling it is refused (PermissionError): it runs all the same."""
    parent = os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child
        code = 2
        try:
            os.setgid(65534)
            os.setuid(65534)
            code = 0 if pid_alive(parent) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_buffers_of_a_process_that_exited_unreaped_are_swept(tmp_path):
    """A run's process that died and is not reaped yet holds nothing: its leftover
    buffers go, those of a live process stay."""
    dead, live = zombie(), subprocess.Popen(["sleep", "60"])
    try:
        stale = tmp_path / f"ltm-stream-{dead.pid}-ab12"
        kept = tmp_path / f"ltm-stream-{live.pid}-ab12"
        for root in (stale, kept):
            root.mkdir(mode=0o700)
            (root / "w0-P1").write_bytes(b"a server's shares")
        assert sweep_stale_buffers(Path(tmp_path)) == [stale]
        assert not stale.exists()
        assert (kept / "w0-P1").read_bytes() == b"a server's shares"
    finally:
        dead.wait()
        live.kill()
        live.wait()


def test_a_stopped_process_is_said_stopped_until_it_continues():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_stopped(proc.pid) is None
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: state(proc.pid) == "T")
        assert pid_stopped(proc.pid) == "stopped (SIGSTOP)"
        os.kill(proc.pid, signal.SIGCONT)
        wait_until(lambda: state(proc.pid) != "T")
        assert pid_stopped(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()
    assert pid_stopped(proc.pid) is None  # gone


def _wait_forever(report) -> None:
    signal.pause()


def test_a_stream_timed_out_on_a_stopped_process_names_it():
    """Processes that wait on a stopped one (a stream's party, watched by its pid) time
    out naming it, not as slow ones to give more --timeout."""
    ctx = multiprocessing.get_context("fork")
    party = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(party.pid, signal.SIGSTOP)
        wait_until(lambda: state(party.pid) == "T")
        with Processes(ctx) as procs:
            procs.start("server P1", _wait_forever, ())
            with pytest.raises(StreamError) as caught:
                procs.collect(time.perf_counter() + 0.5, {"party P1": party.pid})
    finally:
        party.kill()
        party.wait()
    assert str(caught.value).startswith(
        "the streamed run timed out (server P1 still running): party P1 was stopped "
        "(SIGSTOP) and never continued")
    assert caught.value.party == "party P1"


def wait_until(done) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.005)
