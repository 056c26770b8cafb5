"""The party wrapper, against real child processes."""

from __future__ import annotations

import sys
import time

import pytest

from harness.engine.process import Command, check_call, run_group
from harness.errors import PartyError
from harness.stream import pid_alive


def _py(tmp_path, name, code):
    return Command(name, [sys.executable, "-c", code], tmp_path)


def _alive(pid: int, grace: float = 5.0) -> bool:
    """Still running after ``grace`` seconds (signals are delivered asynchronously)."""
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.01)
    return False


SPAWN_AND_WAIT = (
    "import subprocess, sys, time, pathlib\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "pathlib.Path('{name}.child').write_text(str(child.pid))\n"
    "time.sleep(60)\n")


def _child_pid(tmp_path, name):
    path = tmp_path / f"{name}.child"
    deadline = time.monotonic() + 10
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "child never started"
        time.sleep(0.01)
    return int(path.read_text())


def test_success_collects_output(tmp_path):
    out = run_group([_py(tmp_path, "a", "print('hi'); import sys; print('err', file=sys.stderr)"),
                     _py(tmp_path, "b", "print('there')")], timeout=30)
    assert [c.stdout for c in out] == ["hi\n", "there\n"]
    assert out[0].stderr == "err\n" and all(c.returncode == 0 for c in out)


def test_one_failure_stops_the_others_and_their_children(tmp_path):
    waiting = _py(tmp_path, "waiter", SPAWN_AND_WAIT.format(name="waiter"))
    failing = _py(tmp_path, "failer", "import sys, time; time.sleep(0.5); "
                  "print('boom: bad share file', file=sys.stderr); sys.exit(3)")
    started = time.monotonic()
    with pytest.raises(PartyError) as info:
        run_group([waiting, failing], timeout=60)
    assert time.monotonic() - started < 15
    err = info.value
    assert err.party == "failer" and err.returncode == 3
    assert "boom: bad share file" in str(err) and "exited with status 3" in str(err)
    assert not _alive(_child_pid(tmp_path, "waiter"))


def test_timeout_kills_the_whole_group(tmp_path):
    with pytest.raises(PartyError, match="timed out after 1 s"):
        run_group([_py(tmp_path, "slow", SPAWN_AND_WAIT.format(name="slow"))], timeout=1)
    assert not _alive(_child_pid(tmp_path, "slow"))


def test_process_ignoring_sigterm_is_killed(tmp_path):
    code = ("import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pathlib.Path('stubborn.child').write_text(str(__import__('os').getpid())); "
            "time.sleep(60)")
    with pytest.raises(PartyError):
        check_call(_py(tmp_path, "stubborn", code), timeout=1)
    assert not _alive(_child_pid(tmp_path, "stubborn"))


def test_missing_executable_is_a_party_error(tmp_path):
    with pytest.raises(PartyError, match="cannot start"):
        check_call(Command("x", [str(tmp_path / "nope")], tmp_path), timeout=5)


def test_killed_by_signal_is_described(tmp_path):
    with pytest.raises(PartyError, match="killed by SIGKILL"):
        check_call(_py(tmp_path, "k", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                   timeout=10)
