"""Every bad input is one line ``ltm: error: ...``, exit 1, nothing written.

One test per input the hardening review broke ``ltm`` with; the property-based
layer over the whole argument space is tests/cli/test_cli_properties.py.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
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

    monkeypatch.setattr(workload_module, "synthetic_matrix", drawn)


@pytest.mark.parametrize(("args", "needle"), [
    (["--eta", "1e308"], "fixed-point overflow"),
    (["--eta", "nan"], "--eta must be a finite number"),
    (["--epsilon", "1e-300"], "fixed-point overflow"),
    (["--epsilon", "inf"], "--epsilon must be a finite number"),
    (["--delta", "nan"], "--delta must be a finite number"),
    (["--seed", "-1"], "--seed must lie in [0, "),
    (["--clients", "10000000000000"], "--clients must be at most "),
    (["--clients", "1000000000", "--dim", "100000"], "GB of memory"),
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
    (["--scale", "1e5"], "GB of memory"),
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
        # a file that does hold what its header claims: more than this machine's memory
        (_header_only(tmp / "huge.npy", (rows, 1000), 8 * rows * 1000), "GB of memory"),
        (tmp / "garbage.npy", "cannot read data file"),
    ]


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
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        # 8 MB of shares per server cannot fit on a 2 MB file system.
        one_line_error(capsys, ["run", "--clients", "100000", "--rows", "10", "--dim", "10",
                                "--noise", "none", "--out", str(disk / "out")],
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
