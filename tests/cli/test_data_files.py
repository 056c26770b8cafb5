"""``ltm run --data``: the summary names the rows and columns used and whether a header
line was skipped; a run R_D would reveal as zeros is refused unless asked for; a bad
row found while streaming is one line and no output."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from harness.cli import build_parser, main

pytestmark = pytest.mark.mpspdz

TABLE = np.random.default_rng(11).uniform(-1, 1, size=(2000, 10))


def _ltm(capsys, *args):
    code = main(["run", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _threshold(m: int, d: int = 10, s: int = 1, delta: float = 1e-6) -> float:
    return 8 * m * math.log(d * m / delta) + s


def test_own_data_below_r_d_s_threshold_is_refused_naming_the_rows_that_work(
        tmp_path, capsys, mp_spdz, program_cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    path = tmp_path / "mine.csv"
    np.savetxt(path, TABLE, delimiter=",")
    most = max(m for m in range(1, 100) if _threshold(m) < 2000)
    assert most == 13  # the largest m with 2000 > 8 m ln(10 m / 1e-6) + 1
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, "--data", str(path), "--out", str(out))
    assert code == 1 and err.count("\n") == 1, err
    assert err == (f"ltm: error: --data has n=2000 rows, too few for m=100 sketch rows: the "
                   f"paper's client randomizer R_D would send zeros (it needs n > 8 m "
                   f"ln(dm/delta) + s + t' = {_threshold(100):.1f}, t' the corrupt clients of "
                   f"--corrupt-clients; see the docs page Privacy of the client noise); use "
                   f"--rows {most} or fewer sketch rows, or pass --allow-zero-output to run "
                   "the paper's randomizer as it is\n")
    assert not out.exists()

    # The largest m it names runs, with noise, and the summary says what was read.
    code, printed, err = _ltm(capsys, "--data", str(path), "--rows", str(most),
                              "--out", str(out))
    assert code == 0, err
    assert "verified: yes" in printed and "R_D sent zeros" not in printed
    assert (f"  data: {path}, 2000 rows x 10 columns (no header line; --header skips the "
            "first line)") in printed.splitlines()
    assert np.count_nonzero(np.load(out / "output.npy")) > 0

    # The paper's behaviour, asked for: zeros, and the summary says so.
    code, printed, err = _ltm(capsys, "--data", str(path), "--allow-zero-output",
                              "--out", str(tmp_path / "zeros"))
    assert code == 0, err
    assert "R_D sent zeros" in printed
    # in words a newcomer can follow: what it means and what to change
    assert ("n=2000 clients are too few for m=100 sketch rows, so the paper's client "
            "randomizer R_D sent zeros: the release holds no data") in printed
    assert "use more clients or fewer --rows" in printed
    assert np.count_nonzero(np.load(tmp_path / "zeros" / "output.npy")) == 0


def test_the_help_of_data_names_the_threshold():
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    text = " ".join(commands.choices["run"].format_help().split())
    assert "n > 8 m ln(dm/delta) + s + t' rows, else R_D would send zeros" in text
    assert "--allow-zero-output" in text and "--header, --no-header" in text


def test_the_help_of_program_says_what_each_program_does():
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    for command in ("run", "reproduce"):
        text = " ".join(commands.choices[command].format_help().split())
        for said in ("fast, MP-SPDZ sums the shares in blocks as they stream in",
                     "reference, the textbook program that adds one row at a time",
                     "local, each server sums its own shares and MP- SPDZ only opens the sums"):
            assert said.replace("MP- SPDZ", "MP-SPDZ") in text.replace("MP- SPDZ", "MP-SPDZ"), (
                command, said)


@pytest.mark.parametrize(("given", "header"), [([], True), (["--header"], True),
                                               (["--no-header"], None)])
def test_the_summary_and_result_say_whether_a_header_line_was_skipped(
        tmp_path, capsys, mp_spdz, program_cache, monkeypatch, given, header):
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    path = tmp_path / "named.csv"
    path.write_bytes(b"\xef\xbb\xbf" + b"x,y\r\n" + "".join(
        f"{a!r},{b!r}\r\n" for a, b in TABLE[:60, :2].tolist()).encode())
    out = tmp_path / "out"
    code, printed, err = _ltm(capsys, "--data", str(path), "--rows", "4", "--noise", "none",
                              *given, "--out", str(out))
    if header is None:  # the names read as a row: refused, naming the line and the fix
        assert code == 1 and not out.exists()
        assert err.startswith(f"ltm: error: data file {path}, line 1: column 1 holds 'x', "
                              "not a number;") and "pass --header" in err, err
        return
    assert code == 0, err
    assert "n=60 d=2" in printed
    assert (f"  data: {path}, 60 rows x 2 columns (its first line skipped as a header; "
            "--no-header reads it as a row)") in printed.splitlines()
    saved = json.loads((out / "result.json").read_text())
    assert saved["parameters"]["layout"]["data_header"] is True
    assert np.array_equal(np.load(out / "data.npy"), TABLE[:60, :2])


@pytest.mark.parametrize("program", ["local", "reference"])
def test_a_bad_row_of_a_streamed_csv_is_one_line_naming_its_line_and_no_output(
        tmp_path, mp_spdz, program):
    # Streamed, the file is parsed a chunk at a time: the text cell deep in it is found
    # by a client worker (or reference's data owner) mid-stream, after the index passed.
    table = np.random.default_rng(12).uniform(-1, 1, size=(300_000, 2))
    path = tmp_path / "a.csv"
    lines = [f"{a!r},{b!r}\n" for a, b in table.tolist()]
    lines[234_567] = "0.5,n/a\n"
    path.write_text("".join(lines))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--program", program, "--data", str(path),
         "--rows", "10", "--noise", "none", "--out", str(out), "--no-install"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ltm: error: data file {path}, line 234568: column 2 holds 'n/a', not a number; "
        "write a number there, or remove the line"], done.stderr
    assert not out.exists()
