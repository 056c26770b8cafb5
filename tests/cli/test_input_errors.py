"""Every bad input is one line ``ltm: error: ...``, exit 1, nothing written.

One test per input the hardening review broke ``ltm`` with; the property-based
layer over the whole argument space is tests/cli/test_cli_properties.py.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from harness.cli import analyze as analyze_cli
from harness.cli import main
from harness.errors import available_memory

# The module that draws the data (harness.experiments re-exports its functions).
workload_module = importlib.import_module("harness.experiments.workload")


def one_line_error(capsys, argv: list[str], needle: str) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert code == 1, captured.out + err
    assert err.startswith("ltm: error: ") and err.count("\n") == 1, err
    assert needle in err, err
    return err


def nothing_in(directory: Path, *allowed: str) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted(allowed)


@pytest.fixture
def no_drawing(monkeypatch):
    """Fail loudly if a run draws its data before its numbers were checked."""
    def drawn(*args, **kwargs):
        raise AssertionError("data drawn before the options were checked")

    monkeypatch.setattr(workload_module, "SyntheticRows", drawn)


@pytest.mark.parametrize(("args", "needle"), [
    # the default (analytic) calibration names its accountant's range; the corollary's
    # noise overflows the fixed point
    (["--eta", "1e308"], "--eta must lie in [1e-12, 1e+12] for gaussian noise"),
    (["--eta", "1e308", "--calibration", "corollary"], "fixed-point overflow"),
    (["--eta", "nan"], "--eta must be a finite number"),
    (["--epsilon", "1e-300"], "--epsilon must lie in [0.0001, 100] for gaussian noise"),
    (["--epsilon", "1e-300", "--calibration", "corollary"], "fixed-point overflow"),
    (["--epsilon", "inf"], "--epsilon must be a finite number"),
    (["--delta", "nan"], "--delta must be a finite number"),
    (["--seed", "-1"], "--seed must lie in [0, "),
    (["--clients", "10000000000000"], "--clients must be at most "),
    (["--clients", "1000000000", "--dim", "100000"], "GB of disk"),  # fast streams to disk
    # reference streams too: its data owner's input text, or its servers' share files
    (["--clients", "1000000000", "--dim", "100000", "--program", "reference"],
     "the data owner's input text at n=1000000000"),
    (["--clients", "1000000000", "--dim", "100000", "--program", "reference", "--input",
      "shares"], "the parties' share files at n=1000000000"),
    (["--clients", "1000000000", "--dim", "100000", "--dense"], "GB of memory"),
    (["--dim", "100000000"], "--dim must be at most 16777216"),
    (["--timeout", "nan"], "--timeout must be a finite number"),
    (["--timeout", "0"], "--timeout must lie in (0, "),
    (["--port", "99999"], "--port must lie in [1024, 65535]"),
    (["--parties", "100000"], "--parties must be at most 256"),
    (["--corrupt-clients", "-5"], "--corrupt-clients must lie in [0, "),
])
def test_absurd_numbers_are_refused_before_any_data_is_drawn(tmp_path, capsys, no_drawing,
                                                             args, needle):
    one_line_error(capsys, ["run", *args, "--out", str(tmp_path / "out")], needle)
    nothing_in(tmp_path)


@pytest.mark.parametrize(("args", "needle"), [
    (["--scale", "inf"], "--scale must be a finite number"),
    (["--scale", "1e5"], "GB of disk"),  # fast streams its share files to disk
    (["--repeat", "1000000000"], "--repeat must lie in [1, 100000]"),
    (["--seed", "-2"], "--seed must lie in [0, "),
    (["--timeout", "-1"], "--timeout must lie in (0, "),
])
def test_absurd_sweep_numbers_are_refused_before_the_sweep(tmp_path, capsys, args, needle):
    one_line_error(capsys, ["reproduce", "table4", *args, "--out", str(tmp_path / "R")],
                   needle)
    nothing_in(tmp_path)


def _header_only(path: Path, shape: tuple[int, ...], size: int | None = None) -> Path:
    with open(path, "wb") as fh:
        npy_format.write_array_header_1_0(
            fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
        if size is not None:
            fh.truncate(fh.tell() + size)  # sparse: claims the bytes without using them
    return path


def _npy_cases(tmp: Path) -> list[tuple[Path, str]]:
    empty = tmp / "empty.npy"
    empty.write_bytes(b"")
    np.save(tmp / "no-rows.npy", np.zeros((0, 3)))
    rows = 16 * available_memory() // (8 * 1000)  # far beyond, whatever others free meanwhile
    return [
        (empty, "is empty"),
        (tmp / "no-rows.npy", "at least one row"),
        # a header promising more than the file holds
        (_header_only(tmp / "short.npy", (10**9, 1000)), "cannot read data file"),
        # a file that does hold what its header claims, 16 times this machine's memory:
        # fast streams it, and its parties' share files cannot fit on the disk
        (_header_only(tmp / "huge.npy", (rows, 1000), 8 * rows * 1000), "GB of disk"),
        (tmp / "garbage.npy", "cannot read data file"),
        # Not an array file at all, or an array of Python objects: said in words, not by
        # numpy's advice to load it with allow_pickle
        (_written(tmp / "text.npy", b"1,2\n3,4\n"), "text.npy: it is not a numpy array file "
         "(it lacks the header numpy.save writes: a pickle, or another format renamed .npy); "
         "save the matrix with numpy.save, or as a .csv file"),
        (_written(tmp / "pickle.npy", pickle.dumps([[1.0, 2.0]])), "not a numpy array file"),
        (_saved(tmp / "objects.npy", np.array([[1, "a"]], dtype=object)),
         "objects.npy: it holds Python objects (an object array), not numbers; convert it to "
         "numbers (array.astype(float)) and save that with numpy.save"),
    ]


def _written(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def _saved(path: Path, array: np.ndarray) -> Path:
    np.save(path, array, allow_pickle=True)
    return path


def test_npy_files_that_cannot_be_a_matrix(tmp_path, capsys, mp_spdz):
    data = tmp_path / "data"
    data.mkdir()
    (data / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    for path, needle in _npy_cases(data):
        one_line_error(capsys, ["run", "--data", str(path), "--rows", "2", "--out",
                                str(tmp_path / "out")], needle)
    nothing_in(tmp_path, "data")


def test_out_under_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    for argv in (["run"], ["reproduce", "table4"], ["utility"]):
        one_line_error(capsys, [*argv, "--out", str(tmp_path / "file" / "sub")],
                       "lies under")
        one_line_error(capsys, [*argv, "--out", str(tmp_path / "file")], "is a file")
    assert (tmp_path / "file").read_text() == "mine"
    nothing_in(tmp_path, "file")


@contextlib.contextmanager
def read_only_dir(path: Path):
    """A directory no one can write, root included: a read-only mount (or a mode as a user)."""
    path.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)],
                       check=True)
        try:
            yield path
        finally:
            subprocess.run(["umount", str(path)], check=True)
    else:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)


def test_out_in_a_read_only_directory(tmp_path, capsys, no_drawing):
    with read_only_dir(tmp_path / "ro") as ro:
        for argv in (["run"], ["reproduce", "table4"], ["utility"]):
            one_line_error(capsys, [*argv, "--out", str(ro / "out")], "not writable")
        nothing_in(ro)


def test_utility_out_that_is_a_file_is_refused_before_the_sweep(tmp_path, capsys,
                                                                monkeypatch):
    def sweep(*args, **kwargs):
        raise AssertionError("the sweep ran before its output was checked")

    monkeypatch.setattr(analyze_cli, "sweep", sweep)
    (tmp_path / "f").write_text("")
    one_line_error(capsys, ["utility", "--out", str(tmp_path / "f")], "is a file")


def test_inventory_that_is_not_utf8(tmp_path, capsys, no_drawing):
    inventory = tmp_path / "hosts.toml"
    inventory.write_bytes(b'known_hosts = "k"\n[[party]]\nname = "\xff\xfe"\n')
    for argv in (["run", "--hosts", str(inventory), "--out", str(tmp_path / "out")],
                 ["hosts", "check", str(inventory)]):
        one_line_error(capsys, argv, "not UTF-8")
    nothing_in(tmp_path, "hosts.toml")


def test_a_compiler_that_writes_no_bytecode(tmp_path, capsys, mp_spdz, monkeypatch):
    fake = tmp_path / "fake-mp-spdz"
    (fake / "Compiler").mkdir(parents=True)
    (fake / "Compiler" / "__init__.py").write_text("")
    (fake / "compile.py").write_text("import sys\nsys.exit(0)\n")  # "succeeds", writes nothing
    (fake / "semi2k-party.x").symlink_to(mp_spdz.binary("semi2k-party.x"))
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    argv = ["run", "--clients", "300", "--rows", "5", "--dim", "2", "--noise", "none",
            "--mp-spdz", str(fake), "--out", str(tmp_path / "out")]
    for _ in range(2):  # and no broken cache entry trips the next run
        one_line_error(capsys, argv, "wrote no schedule or bytecode")
    programs = cache / "ltm-harness" / "programs"
    assert [p.name for p in programs.iterdir() if not p.name.endswith(".lock")] == []
    nothing_in(tmp_path, "cache", "fake-mp-spdz")


# --- ltm analyze: a directory's files must be one run's ---------------------------------


def _run_dir(path: Path, output: np.ndarray, data: np.ndarray, **params) -> Path:
    path.mkdir()
    np.save(path / "output.npy", output)
    np.save(path / "data.npy", data)
    recorded = {"clients": data.shape[0], "dim": data.shape[1], "rows": output.shape[0],
                **params}
    (path / "result.json").write_text(json.dumps({"parameters": recorded}))
    return path


@pytest.mark.parametrize(("output", "params", "needle"), [
    (np.ones((5, 3), dtype=complex), {}, "complex128 values"),
    (np.full((5, 3), np.nan), {}, "non-finite value at row 0, column 0"),
    (np.full((5, 3), np.inf), {}, "non-finite"),
    (np.ones((5, 3)), {"rows": 7}, "result.json says rows=7"),
    (np.ones((5, 3)), {"clients": 99}, "result.json says clients=99"),
    (np.ones((5, 3)), {"dim": 4}, "result.json says dim=4"),
])
def test_analyze_refuses_files_that_are_not_one_run(tmp_path, capsys, output, params,
                                                    needle):
    data = np.random.default_rng(1).uniform(-1, 1, (40, 3))
    directory = _run_dir(tmp_path / "run", output, data, **params)
    one_line_error(capsys, ["analyze", "lowrank", "--k", "1", str(directory)], needle)


def test_analyze_refuses_an_empty_output(tmp_path, capsys):
    directory = _run_dir(tmp_path / "run", np.ones((5, 3)), np.ones((40, 3)))
    (directory / "output.npy").write_bytes(b"")
    one_line_error(capsys, ["analyze", "lowrank", "--k", "1", str(directory)], "0 bytes")


@pytest.mark.mpspdz
@pytest.mark.root
def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys, mp_spdz, program_cache,
                                                    monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    monkeypatch.setenv("XDG_CACHE_HOME", str(program_cache))
    disk = tmp_path / "disk"
    disk.mkdir()
    rows = tmp_path / "rows.csv"  # the user's own rows, which a run copies into its results
    np.savetxt(rows, np.random.default_rng(0).uniform(-0.1, 0.1, (100_000, 10)), fmt="%.6f",
               delimiter=",")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        # fast's 8 MB of shares per server are refused before the run (GB of disk);
        # local writes none, and the 8 MB data.npy of its --data cannot fit on a 2 MB
        # file system.
        one_line_error(capsys, ["run", "--clients", "100000", "--rows", "10", "--dim", "10",
                                "--noise", "none", "--out", str(disk / "out")],
                       "GB of disk")
        nothing_in(disk)
        one_line_error(capsys, ["run", "--data", str(rows), "--rows", "10",
                                "--noise", "none", "--program", "local",
                                "--out", str(disk / "out")],
                       "the disk is full")
        nothing_in(disk)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_files_that_are_not_regular_or_far_too_large(tmp_path, capsys, no_drawing):
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(2 << 20)
    out = str(tmp_path / "out")
    for argv, needle in ((["run", "--hosts", "/dev/zero", "--out", out], "not a regular file"),
                         (["hosts", "check", str(tmp_path)], "not a regular file"),
                         (["run", "--hosts", str(big), "--out", out], "too large"),
                         (["run", "--data", str(tmp_path), "--out", out], "not a regular file"),
                         (["analyze", "lowrank", "--k", "1", "--data", "/dev/zero",
                           str(tmp_path)], "no output.npy")):
        one_line_error(capsys, argv, needle)
    nothing_in(tmp_path, "big.toml")


# --- issue 22: no traceback, ranges, nothing created before validation -----------------


def test_an_internal_error_is_one_line_and_its_traceback_only_on_request(
        tmp_path, capsys, monkeypatch):
    analyze_cli = importlib.import_module("harness.cli.analyze")

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(analyze_cli, "sweep", broken)
    monkeypatch.delenv("LTM_DEBUG", raising=False)
    argv = ["utility", "--out", str(tmp_path / "u")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("ltm: internal error in `ltm utility`: ZeroDivisionError: "
                          "division by zero; rerun with --debug"), err
    for debug_argv, env in ((["--debug", *argv], None), (argv, "1")):
        if env:
            monkeypatch.setenv("LTM_DEBUG", env)
        assert main(debug_argv) == 1
        err = capsys.readouterr().err
        assert "Traceback" in err and "in broken" in err, err
        assert err.splitlines()[-1].startswith("ltm: internal error in `ltm utility`"), err
    nothing_in(tmp_path)


@pytest.mark.parametrize("out", [".", ".."])
def test_out_that_names_no_directory_to_create(tmp_path, capsys, monkeypatch, no_drawing, out):
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    one_line_error(capsys, ["run", "--out", out, "--force"],
                   f"--out must name a directory to create, not {out}")
    one_line_error(capsys, ["reproduce", "table4", "--out", out],
                   f"--out must name a directory to create, not {out}")
    nothing_in(here)
    nothing_in(tmp_path, "empty")


def test_out_names_too_long_for_the_harness_are_refused_before_any_work(tmp_path, capsys,
                                                                        no_drawing):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    for length in (limit - 10, limit, limit + 45):  # room for .NAME.partial-XXXXXXXX needed
        name = "a" * length
        for argv in (["run", "--force"], ["reproduce", "table4"]):
            one_line_error(capsys, [*argv, "--out", str(tmp_path / name)], "bytes long")
        one_line_error(capsys, ["utility", "figure", "lowrank", "--quick", "--out",
                                str(tmp_path / ("b" * (limit + 1)) / "x")], "bytes long")
    nothing_in(tmp_path)


def test_install_prefix_under_a_file(tmp_path, capsys):
    (tmp_path / "archive.tgz").write_bytes(b"not a tarball")
    (tmp_path / "file").write_text("mine")
    one_line_error(capsys, ["mpspdz", "install", "--archive", str(tmp_path / "archive.tgz"),
                            "--prefix", str(tmp_path / "file" / "x")],
                   "--prefix")
    assert (tmp_path / "file").read_text() == "mine"
    nothing_in(tmp_path, "archive.tgz", "file")


@pytest.mark.parametrize(("argv", "needle"), [
    (["utility", "--seed", "-1"], "--seed must lie in [0, "),
    (["utility", "figure", "lowrank", "--quick", "--m", "0"], "--m must lie in [1, "),
    (["utility", "figure", "lowrank", "--quick", "--m", "-5"], "--m must lie in [1, "),
    (["utility", "--lambda", "nan"], "--lambda must be a finite number"),
    (["utility", "--lambda", "-1"], "--lambda must lie in (0, "),
    (["reproduce", "all", "--estimate", "--bandwidth", "inf"],
     "--bandwidth must be a finite number"),
    (["reproduce", "all", "--estimate", "--bandwidth", "1e308"],
     "--bandwidth must lie in [0.001, 10000]"),
    (["reproduce", "table5", "--estimate", "--scale", "1e-308"], "--scale must be at least"),
    (["analyze", "ridge", "--lambda", "1", "--baseline-runs", "1000000000", "RUN"],
     "--baseline-runs must lie in [1, 10000]"),
    (["run", "--epsilon", "1e308"], "--epsilon must lie in (0, 1e+06]"),
    (["hosts", "trust", "--timeout", "inf", "HOSTS"], "--timeout must be a finite number"),
    (["aws", "up", "--parties", "3", "--volume-size", "1000000000"],
     "--volume-size must lie in [8, 16384]"),
    (["aws", "up", "--parties", "3", "--client-hosts", "1000"],
     "--client-hosts must lie in [0, 16]"),
])
def test_absurd_values_of_every_command_are_refused(tmp_path, capsys, no_drawing, argv,
                                                    needle):
    out = [] if argv[0] in ("hosts", "aws", "analyze") or "--estimate" in argv \
        else ["--out", str(tmp_path / "out")]
    one_line_error(capsys, [*argv, *out], needle)
    nothing_in(tmp_path)


def test_table_refusing_its_arguments_leaves_no_out(tmp_path, capsys):
    (tmp_path / "D").mkdir()
    for table in ("table6", "table7"):
        one_line_error(capsys, ["utility", table, "--data-dir", str(tmp_path / "D"), "--runs",
                                "1", "--out", str(tmp_path / "X")], "--runs must lie in [2, ")
        # a missing dataset, found before the grid runs: still no --out
        one_line_error(capsys, ["utility", table, "--data-dir", str(tmp_path / "D"), "--out",
                                str(tmp_path / "X")], "is not in")
    nothing_in(tmp_path, "D")


@pytest.mark.parametrize("content", [None, "[]", "{}"])
def test_analyze_refuses_a_run_without_its_parameters(tmp_path, capsys, content):
    data = np.random.default_rng(1).uniform(-1, 1, (40, 3))
    directory = _run_dir(tmp_path / "run", np.ones((5, 3)), data)
    if content is None:
        (directory / "result.json").unlink()
    else:
        (directory / "result.json").write_text(content)
    one_line_error(capsys, ["analyze", "lowrank", "--k", "2", str(directory)],
                   f"{directory / 'result.json'} ")


def test_analyze_names_the_parameters_it_used_on_its_first_line(tmp_path, capsys):
    rng = np.random.default_rng(1)
    directory = _run_dir(tmp_path / "run", rng.normal(size=(5, 3)), rng.uniform(-1, 1, (40, 3)),
                         noise={"kind": "gaussian", "epsilon": 2.0})
    assert main(["analyze", "lowrank", "--k", "2", str(directory)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "epsilon=2 (result.json), delta=1e-06 (assumed), eta=1 (assumed)" in first, first
    assert main(["analyze", "lowrank", "--k", "2", "--epsilon", "0.5", str(directory)]) == 0
    assert "epsilon=0.5 (--epsilon)" in capsys.readouterr().out.splitlines()[0]


def _huge_header(path: Path) -> Path:
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }" + " " * (4 << 20)
    path.write_bytes(b"\x93NUMPY\x02\x00" + len(header + "\n").to_bytes(4, "little")
                     + (header + "\n").encode() + bytes(32))
    return path


def test_npy_with_a_huge_header_is_one_line(tmp_path, capsys, no_drawing):
    huge = _huge_header(tmp_path / "huge.npy")
    one_line_error(capsys, ["run", "--data", str(huge), "--out", str(tmp_path / "out")],
                   "its header is")
    directory = _run_dir(tmp_path / "run", np.ones((5, 3)), np.ones((40, 3)))
    _huge_header(directory / "output.npy")
    one_line_error(capsys, ["analyze", "lowrank", "--k", "2", str(directory)], "its header is")
    nothing_in(tmp_path, "huge.npy", "run")



def argparse_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 1 and err.startswith("ltm: error: ") and err.count("\n") == 1, err
    return err


def test_a_mistyped_option_is_answered_with_the_closest_one(capsys):
    err = argparse_error(capsys, ["run", "--clinets", "5"])
    assert "did you mean --clients?" in err and "`ltm run --help`" in err
    err = argparse_error(capsys, ["run", "--clinets=5", "--protocl", "semi2k"])
    assert "did you mean --clients, --protocol?" in err
    # nothing close: no guess
    err = argparse_error(capsys, ["run", "--zzzz"])
    assert "--zzzz" in err and "did you mean" not in err


def test_a_missing_data_file_names_what_to_pass(tmp_path):
    from harness.clients import load_matrix
    from harness.errors import InputError

    with pytest.raises(InputError, match="does not exist; pass an existing .csv, .txt or "
                                         "[.]npy file$"):
        load_matrix(tmp_path / "rows.csv")
