"""The host agent (``python -m harness.remote.agent``) as the hosts run it: a real process,
one JSON line per step on stdout, one line on stderr when it fails. Its steps
themselves, ``serve`` and ``stream``, are tested with real hosts in test_host_streams.py,
and ``input`` in test_host_mechanisms.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np

import harness
from harness.clients import DIGEST_KEY_BYTES, noise_digest
from harness.privacy import Dng, central_noise, dng_noise

TREE = Path(harness.__file__).resolve().parent.parent
KEY = ["--digest-key", "ab" * DIGEST_KEY_BYTES]  # the run's public weights' key


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


def _noise(**kw):
    return dng_noise(servers=3, honest=2, eta=1.0, s=1, d=2, epsilon=4.0, delta=1e-3,
                     frac_bits=16, **kw)


def test_the_noise_step_appends_a_servers_own_draw_privately_and_prints_only_its_count(
        tmp_path):
    noise = _noise()
    data = tmp_path / "Player-Data"
    data.mkdir(mode=0o755)
    dest = data / "Input-P0-0"
    dest.write_text("+1 -2 +3 -4 +5 -6 +7 -8\n")  # the server's aggregate, before its noise
    dest.chmod(0o644)
    key = os.urandom(DIGEST_KEY_BYTES)
    done = agent("input", "dng", noise.to_json(), "Player-Data/Input-P0-0", "--cells", "4", "2",
                 "--digest-key", key.hex(), "--append", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    reply = json.loads(line)
    assert reply["step"] == "input" and reply["cells"] == 8
    # nothing of the noise itself but its digest under the run's weights
    assert set(reply) == {"step", "cells", "digest", "seconds"}
    words = np.array(dest.read_text().split(), dtype=np.int64)
    assert words[:8].tolist() == [1, -2, 3, -4, 5, -6, 7, -8] and words.size == 16
    assert np.any(words[8:] != 0)  # Skellam of variance server_mu (in the thousands)
    assert reply["digest"] == noise_digest(words[8:], key)  # of what it input, exactly
    changed = words[8:].copy()
    changed[3] += 5
    assert reply["digest"] != noise_digest(changed, key)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    # A second draw is another one: from a fresh CSPRNG, never a seed
    again = agent("input", "dng", noise.to_json(), "second", "--cells", "4", "2", "--digest-key",
                  key.hex(), cwd=tmp_path)
    assert again.returncode == 0
    second = np.array((tmp_path / "second").read_text().split(), dtype=np.int64)
    assert second.size == 8 and not np.array_equal(second, words[8:])


def test_the_step_runs_only_a_mechanism_that_has_one_with_its_own_parameters(tmp_path):
    central = central_noise(eta=1.0, s=1, d=2, epsilon=4.0, delta=1e-3, frac_bits=16,
                            cells=8, clients=100)
    for argv, message in [
            (["central", central.to_json()], "--mechanism central has no step on the servers"),
            (["nope", _noise().to_json()], "unknown --mechanism 'nope'; choose ltm, dng, "
                                           "central"),
            (["dng", central.to_json()], "is not the noise's parameters")]:
        done = agent("input", *argv, "out", "--cells", "1", "1", *KEY, cwd=tmp_path)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith("agent input: ") and message in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_server_noise_parameters_round_trip_through_json():
    for noise in (_noise(), dng_noise(servers=2, honest=1, eta=1.0, s=1, d=2, epsilon=2.0,
                                      delta=1e-3, frac_bits=16)):
        assert Dng.step_params(noise.to_json()) == noise


def _refused(done: subprocess.CompletedProcess, needle: str) -> None:
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.startswith("agent input: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr and needle in done.stderr, done.stderr


def test_malformed_noise_parameters_and_cell_counts_are_one_line_before_any_draw(tmp_path):
    good = json.loads(_noise().to_json())
    cases = [
        ("{}", ["1", "1"], "is not the noise's parameters"),
        ("[]", ["1", "1"], "not a JSON object"),
        ("nonsense", ["1", "1"], "is not the noise's parameters"),
        (json.dumps({**good, "bogus": 1}), ["1", "1"], "unexpected keyword argument 'bogus'"),
        (json.dumps({**good, "layout": 5}), ["1", "1"], "is not the noise's parameters"),
        (json.dumps({**good, "server_mu": "x"}), ["1", "1"], "server_mu is 'x'"),
        (json.dumps({**good, "server_mu": -5}), ["1", "1"], "server_mu is -5"),
        (json.dumps(good), ["0", "3"], "--cells 0 3: the sketch has at least one row"),
        (json.dumps(good), ["-1", "2"], "--cells -1 2"),
        # far more cells than any machine holds: refused, not a numpy MemoryError
        (json.dumps(good), ["100000000", "100000000"], "GB of memory, but only"),
    ]
    for params, cells, needle in cases:
        done = agent("input", "dng", params, "out", "--cells", *cells, *KEY, cwd=tmp_path)
        _refused(done, needle)
    good = json.dumps(good)
    _refused(agent("input", "dng", good, "out", "--cells", "1", "1", "--digest-key", "abc",
                   cwd=tmp_path), "--digest-key must be 16 bytes in hex")
    assert list(tmp_path.iterdir()) == []


def test_the_noise_step_writes_through_no_link_and_makes_no_directory(tmp_path):
    params = _noise().to_json()
    work = tmp_path / "work"
    (work / "Player-Data").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    target = elsewhere / "victim"
    target.write_text("mine\n")
    target.chmod(0o644)
    (work / "Player-Data" / "Input-P0-0").symlink_to(target)
    (work / "linked").symlink_to(elsewhere)
    for dest, needle in [
        ("Player-Data/Input-P0-0", "Player-Data/Input-P0-0 is a symbolic link"),
        ("linked/Input-P0-0", "linked is a symbolic link"),
        ("missing/deeper/Input-P0-0", "its directory missing is not in the run's working "
                                      "directory"),
        (str(elsewhere / "new"), "must be a path inside the run's working directory"),
        ("../elsewhere/new", "must be a path inside the run's working directory"),
        ("Player-Data", "exists and is not a regular file"),
    ]:
        for append in ([], ["--append"]):
            _refused(agent("input", "dng", params, dest, "--cells", "2", "2", *KEY, *append,
                           cwd=work), needle)
    # The link's target is untouched, its mode too; nothing was created anywhere.
    assert target.read_text() == "mine\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim"]
    assert sorted(p.name for p in work.iterdir()) == ["Player-Data", "linked"]
