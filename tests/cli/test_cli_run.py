"""``ltm run`` from the command line: bad input gives one line, exit 1, nothing written."""

from __future__ import annotations

import json
import os
import socket
import stat

import numpy as np
import pytest

from harness.cli import main

pytestmark = pytest.mark.mpspdz


def _ltm(capsys, *args):
    code = main(["run", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_clean_error(code, err, needle, out_dir):
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[0].startswith("ltm: error: ") and needle in lines[0], err
    assert "Traceback" not in err
    assert not out_dir.exists()
    assert not [p for p in out_dir.parent.iterdir() if ".partial-" in p.name]


SMALL = ["--clients", "300", "--rows", "5", "--dim", "2", "--noise", "none"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--clients", "10", "--rows", "20"], "more rows than there are clients"),
    (["--clients", "100", "--rows", "5", "--sparsity", "6"], "exceeds the number of rows"),
    (["--rows", "0"], "m must be a positive integer"),
    (["--dim", "0", "--clients", "100", "--rows", "5"], "--dim must be a positive integer"),
    (["--clients", "0"], "n must be a positive integer"),
    (["--parties", "1", *SMALL], "--parties must be at least 2"),
    (["--dense", "--clients", "101", "--rows", "10"], "m to divide n"),
    (["--clients", "300", "--rows", "5", "--noise", "laplace"], "dense sketch"),
    (["--frac-bits", "60", *SMALL], "--frac-bits"),
    (["--program", "local", "--input", "party", *SMALL], "needs --input shares"),
    (["--mp-spdz", "/nonexistent/mp-spdz", *SMALL], "/nonexistent/mp-spdz"),
])
def test_bad_parameters(tmp_path, capsys, mp_spdz, args, needle):
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, *args, "--out", str(out))
    _assert_clean_error(code, err, needle, out)


@pytest.mark.parametrize(("content", "name", "needle"), [
    (np.array([[0.5, np.nan]] * 10), "a.npy", "non-finite"),
    (np.array([[0.5, np.inf]] * 10), "a.npy", "non-finite"),
    (np.array([[0.5, 3.0]] * 10), "a.npy", "exceeds the bound eta"),
    (np.zeros((2, 3, 4)), "a.npy", "n x d matrix"),
    (np.array([["a", "b"]] * 10), "a.npy", "numeric"),
    ("1,2\n3,x\n", "a.csv", "a.csv, line 2: column 2 holds 'x', not a number"),
    ("1,2\n", "a.parquet", "use a .csv, .txt or .npy file"),
])
def test_bad_data_files(tmp_path, capsys, mp_spdz, content, name, needle):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content)
    out = tmp_path / "out"
    # Without noise: ten rows are below R_D's threshold, refused before a streamed run
    # reads its rows (tests/cli/test_data_files.py).
    code, _, err = _ltm(capsys, "--data", str(path), "--rows", "2", "--noise", "none",
                        "--out", str(out))
    _assert_clean_error(code, err, needle, out)


def test_missing_data_file(tmp_path, capsys, mp_spdz):
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, "--data", str(tmp_path / "none.npy"), "--out", str(out))
    _assert_clean_error(code, err, "does not exist", out)


def test_csv_with_header_runs(tmp_path, capsys, mp_spdz, program_cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    path = tmp_path / "a.csv"
    path.write_text("x,y\n" + "\n".join(f"{i / 100},{-i / 200}" for i in range(60)) + "\n")
    code, out, err = _ltm(capsys, "--data", str(path), "--rows", "4", "--noise", "none",
                          "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert "verified: yes" in out and "n=60 d=2" in out


def test_fixed_point_overflow_names_the_bound(tmp_path, capsys, mp_spdz):
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, "--frac-bits", "52", "--eta", "4096", "--clients", "4000",
                        "--rows", "2", "--dim", "1", "--noise", "none", "--out", str(out))
    _assert_clean_error(code, err, "2^63", out)


def test_port_in_use(tmp_path, capsys, mp_spdz):
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = tmp_path / "out"
        code, _, err = _ltm(capsys, *SMALL, "--port", str(port), "--out", str(out))
    _assert_clean_error(code, err, f"port {port} is in use", out)


def test_program_that_fails_to_compile(tmp_path, capsys, mp_spdz, monkeypatch):
    fake = tmp_path / "fake-mp-spdz"
    (fake / "Compiler").mkdir(parents=True)
    (fake / "Compiler" / "__init__.py").write_text("")
    (fake / "compile.py").write_text("import sys\nprint('CompilerError: bad program', "
                                     "file=sys.stderr)\nsys.exit(1)\n")
    (fake / "semi2k-party.x").symlink_to(mp_spdz.binary("semi2k-party.x"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, *SMALL, "--mp-spdz", str(fake), "--out", str(out))
    _assert_clean_error(code, err, "compiler failed", out)
    assert "CompilerError: bad program" in err


def test_missing_party_binary(tmp_path, capsys, mp_spdz):
    fake = tmp_path / "no-binaries"
    (fake / "Compiler").mkdir(parents=True)
    (fake / "compile.py").write_text("")
    out = tmp_path / "out"
    code, _, err = _ltm(capsys, *SMALL, "--mp-spdz", str(fake), "--out", str(out))
    _assert_clean_error(code, err, "semi2k-party.x", out)


def test_existing_results_are_not_overwritten(tmp_path, capsys, mp_spdz, program_cache,
                                              monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    code, _, err = _ltm(capsys, *SMALL, "--out", str(out))
    assert code == 1 and "--force" in err
    assert (out / "result.json").read_text() == "{}"
    code, stdout, err = _ltm(capsys, *SMALL, "--out", str(out), "--force")
    assert code == 0, err
    assert (out / "result.json").read_text() != "{}"


def test_bare_run_works_with_defaults(tmp_path, capsys, mp_spdz, program_cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    monkeypatch.chdir(tmp_path)
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    assert "verified: yes, bit-exact" in out and "n=100000 d=10 m=100 s=1" in out
    (result_dir,) = (tmp_path / "results").iterdir()
    # Nothing of size n is written: the sketch and the synthetic rows are the recorded
    # seed's, and `ltm analyze` recomputes the rows from it.
    # diagnostics.json: the noise's observed mean and variance, the owner's alone
    assert {p.name for p in result_dir.iterdir()} == {"result.json", "output.npy",
                                                      "diagnostics.json"}
    assert stat.S_IMODE(os.stat(result_dir / "diagnostics.json").st_mode) == 0o600
    assert "noise_mean" not in (result_dir / "result.json").read_text()
    # the default calibration is the tightest certified: the whole epsilon asked for
    privacy = json.loads((result_dir / "result.json").read_text())["privacy"]
    assert privacy["calibration"] == "analytic"
    assert 0.999 <= privacy["certified_epsilon"] <= privacy["requested_epsilon"] == 1.0
    assert privacy["std_ratio"] < 1.12
    assert main(["analyze", "lowrank", "--k", "2", "--json", str(result_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["psi"] >= 0
    mode = stat.S_IMODE(os.stat(result_dir).st_mode)
    assert mode & 0o700 == 0o700


def test_a_closed_output_pipe_ends_quietly_as_sigpipe_would(tmp_path):
    """`ltm ... | head`: the reader gone is no internal error, but the exit status of a
    program that SIGPIPE ends, and a broken pipe of the harness's own is still a bug."""
    import signal
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has left before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", "doctor"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "LTM_NO_INSTALL": "1"}, cwd=tmp_path)
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + signal.SIGPIPE, proc.stderr
    assert proc.stderr == ""
