"""Property: whatever the arguments, ``ltm`` exits 0, or exits 1 with one line.

Hypothesis draws argument lists for ``run``, ``reproduce``, ``utility`` and
``analyze`` from values that are mostly wrong (non-finite, huge, negative,
not numbers, damaged files) and a few that are right. Heavy work is cut off
where it would start (drawing data, compiling, the utility sweep): every
check made before that point is real, and reaching it counts as success. The
budget is bounded (``LTM_HYPOTHESIS_EXAMPLES`` per command, derandomized, so CI
runs the same examples every time).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import analyze as analyze_cli
from harness.cli import main
from harness.errors import InputError

EXAMPLES = int(os.environ.get("LTM_HYPOTHESIS_EXAMPLES", "40"))
BUDGET = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow])
run_module = importlib.import_module("harness.experiments.run")
workload_module = importlib.import_module("harness.experiments.workload")
reproduce_module = importlib.import_module("harness.experiments.reproduce")


class Reached(InputError):
    """Raised where heavy work would begin: the arguments passed every check."""


def _reached(*args, **kwargs):
    raise Reached("stop: the checks passed and heavy work would start here")


@pytest.fixture(scope="module")
def heavy_work_stops():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workload_module, "synthetic_matrix", _reached)
        mp.setattr(run_module, "program_for", _reached)
        mp.setattr(reproduce_module, "program_for", _reached)
        mp.setattr(analyze_cli, "sweep", _reached)
        yield


def wild_number() -> st.SearchStrategy[str]:
    """Numbers as a user might type them: mostly wrong, sometimes right."""
    return st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["0", "1", "2", "3", "10", "100", "0.5", "1e-300", "1e308", "-0",
                         "nan", "inf", "-inf", "1e999", "", "abc", "0x10", "1_000", " 7"]),
    )


def small_int(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(str)


def options(spec: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """Any subset of ``spec``'s options, each with a drawn value."""
    return st.dictionaries(st.sampled_from(sorted(spec)), st.just(None)).flatmap(
        lambda chosen: st.tuples(*(spec[k] for k in chosen)).map(
            lambda values, chosen=tuple(chosen): [a for k, v in zip(chosen, values, strict=True)
                                                  for a in (k, v)]))


def check_outcome(capsys, argv: list[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's rejections go through here
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert code in (0, 1), (argv, code, err)
    if code == 1:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ltm: error: "), (argv, err)


RUN_OPTIONS = {
    "--clients": st.one_of(wild_number(), small_int(1, 2000)),
    "--dim": st.one_of(wild_number(), small_int(1, 5)),
    "--rows": st.one_of(wild_number(), small_int(1, 20)),
    "--sparsity": st.one_of(wild_number(), small_int(1, 3)),
    "--parties": st.one_of(wild_number(), small_int(2, 4)),
    "--epsilon": wild_number(), "--delta": wild_number(), "--eta": wild_number(),
    "--corrupt-clients": wild_number(), "--frac-bits": wild_number(),
    "--seed": wild_number(), "--port": wild_number(), "--timeout": wild_number(),
    "--noise": st.sampled_from(["gaussian", "laplace", "none", "poisson"]),
    "--program": st.sampled_from(["fast", "reference", "local", "other"]),
    "--input": st.sampled_from(["shares", "party", "x"]),
    "--network": st.sampled_from(["none", "t3.large", "mars"]),
}


@BUDGET
@given(args=options(RUN_OPTIONS), dense=st.booleans())
def test_run_arguments(tmp_path, capsys, heavy_work_stops, mp_spdz, args, dense):
    out = tmp_path / "out"
    check_outcome(capsys, ["run", *args, *(["--dense"] if dense else []), "--out", str(out)])
    assert not out.exists()


@BUDGET
@given(content=st.one_of(st.binary(max_size=300),
                         st.sampled_from([b"\x93NUMPY", b"1,2\n3,4\n" * 10, b"x\n",
                                          b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', "
                                          b"'fortran_order': False, 'shape': (9999999999, 9)}"
                                          b"\n"])),
       suffix=st.sampled_from([".npy", ".csv", ".txt"]),
       rows=small_int(1, 3))
def test_run_data_files(tmp_path_factory, capsys, heavy_work_stops, mp_spdz, content, suffix,
                        rows):
    directory = tmp_path_factory.mktemp("data")
    path = directory / f"a{suffix}"
    path.write_bytes(content)
    check_outcome(capsys, ["run", "--data", str(path), "--rows", rows, "--out",
                           str(directory / "out")])
    assert not (directory / "out").exists()


@BUDGET
@given(content=st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(['known_hosts = "k"', "[[party]]", 'name = "a"',
                              'host = "127.0.0.1"', "port = 99999", 'user = "u"',
                              "base_port = -1", 'mp_spdz = "/x"', "x = 1", "[[party]]",
                              'host = ""']), max_size=12).map(
        lambda lines: "\n".join(lines).encode())))
def test_run_inventories(tmp_path_factory, capsys, heavy_work_stops, mp_spdz, content):
    directory = tmp_path_factory.mktemp("inventory")
    (directory / "hosts.toml").write_bytes(content)
    check_outcome(capsys, ["run", "--hosts", str(directory / "hosts.toml"), "--out",
                           str(directory / "out")])


REPRODUCE_OPTIONS = {
    "--scale": st.one_of(wild_number(), st.sampled_from(["0.001", "0.01"])),
    "--repeat": wild_number(), "--seed": wild_number(), "--timeout": wild_number(),
    "--bandwidth": wild_number(),
    "--program": st.sampled_from(["fast", "reference", "local"]),
    "--noise": st.sampled_from(["gaussian", "none"]),
    "--sharing": st.sampled_from(["full", "seeded"]),
}


@BUDGET
@given(table=st.sampled_from(["table3", "table4", "table5", "all", "table9"]),
       args=options(REPRODUCE_OPTIONS), estimate=st.booleans())
def test_reproduce_arguments(tmp_path_factory, capsys, heavy_work_stops, mp_spdz, table,
                             args, estimate):
    out = tmp_path_factory.mktemp("reproduce") / "R"
    check_outcome(capsys, ["reproduce", table, *args, *(["--estimate"] if estimate else []),
                           "--no-progress", "--out", str(out)])


UTILITY_OPTIONS = {
    "--problem": st.sampled_from(["lowrank", "ridge", "pca"]),
    "--n-min": wild_number(), "--n-max": wild_number(), "--points": wild_number(),
    "--d": wild_number(), "--k": wild_number(), "--lambda": wild_number(),
    "--mu2": st.one_of(wild_number(), st.sampled_from(["n", "n^2", "n^3"])),
    "--m": wild_number(), "--s": wild_number(), "--repeat": wild_number(),
    "--epsilon": wild_number(), "--delta": wild_number(), "--eta": wild_number(),
    "--p-values": st.sampled_from(["0.5", "0,1", "2", "a,b", "nan", ""]),
    "--seed": wild_number(),
}


@BUDGET
@given(args=options(UTILITY_OPTIONS))
def test_utility_arguments(tmp_path_factory, capsys, heavy_work_stops, args):
    out = tmp_path_factory.mktemp("utility") / "u"
    check_outcome(capsys, ["utility", *args, "--out", str(out)])
    assert not out.exists()


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory) -> Path:
    """A small run's outputs as `ltm run` writes them."""
    directory = tmp_path_factory.mktemp("run")
    rng = np.random.default_rng(3)
    np.save(directory / "data.npy", rng.uniform(-1, 1, (60, 4)))
    np.save(directory / "output.npy", rng.normal(size=(6, 4)))
    (directory / "result.json").write_text(
        '{"parameters": {"clients": 60, "dim": 4, "rows": 6}}')
    return directory


@BUDGET
@given(problem=st.sampled_from(["lowrank", "ridge"]), k=wild_number(), lam=wild_number(),
       column=st.one_of(wild_number(), small_int(-5, 5)), as_json=st.booleans())
def test_analyze_arguments(capsys, run_directory, problem, k, lam, column, as_json):
    extra = ["--k", k] if problem == "lowrank" else ["--lambda", lam, "--target-column",
                                                     column]
    check_outcome(capsys, ["analyze", problem, *extra, *(["--json"] if as_json else []),
                           str(run_directory)])
