"""The host agent (``python -m harness.remote.agent``) as the hosts run it: a real process,
one JSON line per step on stdout, one line on stderr when it fails. Its steps
themselves, ``serve`` and ``stream``, are tested with real hosts in test_host_streams.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import harness

TREE = Path(harness.__file__).resolve().parent.parent


def agent(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    return subprocess.run([sys.executable, "-m", "harness.remote.agent", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, **kw)


def test_a_failing_step_says_so_in_one_line_and_prints_no_reply(tmp_path):
    done = agent("serve", "missing-spec.json", "0", "0", "c.pem", "k.key", "p.pem", "out.data",
                 "--bind", "127.0.0.1", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("agent serve: ")
    assert "missing-spec.json" in done.stderr
    assert not (tmp_path / "out.data").exists()


def test_the_whole_file_steps_are_gone_from_the_agent(tmp_path):
    # Every run streams: a host is never asked to receive, expand or aggregate whole files.
    for step in ("expand", "aggregate", "prepare", "send", "receive"):
        done = agent(step, cwd=tmp_path)
        assert done.returncode == 2 and "invalid choice" in done.stderr  # usage
