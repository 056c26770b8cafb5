"""Property: whatever the arguments, ``ltm`` exits 0, or exits 1 with one line.

Hypothesis draws argument lists for every subcommand (``run``, ``reproduce``
with and without ``--estimate``, ``analyze``, ``utility`` and its figure and
table grids, ``mpspdz install``, ``doctor``, ``hosts``, ``aws`` under moto)
from values that are mostly wrong (non-finite, huge, negative, not numbers,
damaged files, ``--out`` names that are ``.``, ``..``, too long or unicode) and
a few that are right. Heavy work is cut off where it would start (drawing data,
compiling, the utility sweeps): every check made before that point is real, and
reaching it counts as success; a refusal leaves nothing behind. Nothing
connects anywhere: inventories are broken, AWS is moto's. The budget is bounded
(``LTM_HYPOTHESIS_EXAMPLES`` per command, fewer for the slow ones,
derandomized, so CI runs the same examples every time).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.analyst import figures, uci, utility
from harness.cli import main
from harness.errors import InputError

EXAMPLES = int(os.environ.get("LTM_HYPOTHESIS_EXAMPLES", "40"))
BUDGET = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow])
# For the commands whose examples cost more (moto, the analyst's baselines, installs).
SMALL_BUDGET = settings(BUDGET, max_examples=max(1, EXAMPLES // 3))
analyze_cli = importlib.import_module("harness.cli.analyze")
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
        mp.setattr(workload_module, "SyntheticRows", _reached)
        mp.setattr(run_module, "program_for", _reached)
        mp.setattr(reproduce_module, "program_for", _reached)
        mp.setattr(utility, "sweep", _reached)
        mp.setattr(analyze_cli, "sweep", _reached)
        mp.setattr(figures, "run_figure", _reached)
        mp.setattr(uci, "run_table", _reached)
        yield


@pytest.fixture(scope="module", autouse=True)
def nothing_connects():
    """No example may reach a network or install anything: a try is a failing test."""
    def refuse(*args, **kwargs):
        raise AssertionError("an example tried to reach the network")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(urllib.request, "urlopen", refuse)
        mp.setenv("LTM_NO_INSTALL", "1")
        mp.delenv("LTM_DEBUG", raising=False)
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


def check_outcome(capsys, argv: list[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's rejections go through here
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    # An internal error is one line too, but a bug: it fails here ("ltm: internal error").
    assert code in (0, 1), (argv, code, err)
    if code == 1:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ltm: error: "), (argv, err)
    return code, err


def refused(outcome: tuple[int, str]) -> bool:
    """Refused by a check, not stopped where the work starts (a sweep's DIR exists then)."""
    code, err = outcome
    return code == 1 and "stop: the checks passed" not in err


def out_name() -> st.SearchStrategy[str]:
    """--out names: special, too long (in bytes, for the harness's siblings), unicode."""
    safe = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00")
    return st.one_of(
        st.sampled_from([".", "..", "./.", "a/..", "out", "a" * 231, "a" * 240, "a" * 255,
                         "a" * 300, "\u00fc" * 120, "\u00fc" * 128, "\U0001f600" * 60,
                         "sp ace", "--", "-x", "~", "$HOME", "a\nb", "nested/dir/out"]),
        st.text(safe, min_size=1, max_size=300))


@contextlib.contextmanager
def in_empty_dir(root: Path):
    """A fresh empty directory as the working directory: relative --out names land there."""
    here = Path(os.getcwd())
    os.chdir(root)
    try:
        yield root
    finally:
        os.chdir(here)


def left_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


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
    # --estimate writes nothing: it takes no --out (ltm refuses the two together)
    where = ["--estimate"] if estimate else ["--out", str(out)]
    check_outcome(capsys, ["reproduce", table, *args, *where, "--no-progress"])


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


# --- --out names, for every command that writes a directory --------------------------

OUT_COMMANDS = {
    "run": ["run", "--force"],
    "reproduce": ["reproduce", "table4", "--no-progress"],
    "utility": ["utility", "--no-progress"],
    "figure": ["utility", "figure", "lowrank", "--quick", "--no-progress"],
    "table6": ["utility", "table6", "--data-dir", "DATA", "--no-progress"],
}


@BUDGET
@given(command=st.sampled_from(sorted(OUT_COMMANDS)), name=out_name())
def test_out_names(tmp_path_factory, capsys, heavy_work_stops, mp_spdz, command, name):
    root = tmp_path_factory.mktemp("names")
    work = root / "cwd"
    work.mkdir()
    (root / "DATA").mkdir()  # empty: table6 refuses it, after --out was checked
    argv = [str(root / "DATA") if a == "DATA" else a for a in OUT_COMMANDS[command]]
    with in_empty_dir(work):
        outcome = check_outcome(capsys, [*argv, "--out", name])
    # Refused: nothing left. (A run stopped where its work starts leaves nothing either.)
    if refused(outcome) or (command == "run" and outcome[0] == 1):
        assert left_in(work) == [] and left_in(root) == ["DATA", "cwd"], (argv, name)


# --- analyze: its numbers and its run directory --------------------------------------

@pytest.fixture(scope="module")
def result_variants(tmp_path_factory) -> dict[str, Path]:
    """A run directory per state of result.json: good, missing, [], {}, not JSON."""
    rng = np.random.default_rng(4)
    dirs = {}
    for name, text in (("good", '{"parameters": {"clients": 30, "dim": 3, "rows": 4, '
                                '"noise": {"epsilon": 1.0, "delta": 1e-6, "eta": 1.0}}}'),
                       ("missing", None), ("list", "[]"), ("empty", "{}"), ("torn", '{"par')):
        directory = tmp_path_factory.mktemp(f"result-{name}")
        np.save(directory / "data.npy", rng.uniform(-1, 1, (30, 3)))
        np.save(directory / "output.npy", rng.normal(size=(4, 3)))
        if text is not None:
            (directory / "result.json").write_text(text)
        dirs[name] = directory
    return dirs


ANALYZE_OPTIONS = {
    "--epsilon": wild_number(),
    "--baseline-runs": st.one_of(st.sampled_from(["0", "-1", "1e9", "nan", "x", "1000000000"]),
                                 small_int(1, 2)),
    "--seed": wild_number(),
    "--calibration": st.sampled_from(["corollary", "experiments", "paper"]),
}


@SMALL_BUDGET
@given(problem=st.sampled_from(["lowrank", "ridge"]), state=st.sampled_from(
    ["good", "missing", "list", "empty", "torn"]), args=options(ANALYZE_OPTIONS),
    k=st.one_of(wild_number(), small_int(1, 2)), lam=wild_number())
def test_analyze_options_and_results(capsys, result_variants, problem, state, args, k, lam):
    extra = ["--k", k] if problem == "lowrank" else ["--lambda", lam]
    check_outcome(capsys, ["analyze", problem, *extra, *args, str(result_variants[state])])


# --- utility figure | table6 | table7 ------------------------------------------------

GRID_OPTIONS = {
    "--runs": st.one_of(wild_number(), small_int(2, 3)),
    "--m": st.one_of(wild_number(), small_int(1, 60)),
    "--seed": wild_number(),
    "--calibration": st.sampled_from(["corollary", "experiments", "x"]),
}


@BUDGET
@given(grid=st.sampled_from([["figure", "lowrank"], ["figure", "ridge"],
                             ["figure", "ridge-lambda"], ["figure", "pca"], ["table6"],
                             ["table7"]]),
       args=options(GRID_OPTIONS), quick=st.booleans())
def test_utility_grids(tmp_path_factory, capsys, heavy_work_stops, grid, args, quick):
    root = tmp_path_factory.mktemp("grid")
    (root / "DATA").mkdir()
    data = ["--data-dir", str(root / "DATA")] if grid[0] != "figure" else []
    flags = ["--quick"] if quick and grid[0] == "figure" else []
    if check_outcome(capsys, ["utility", *grid, *data, *flags, *args, "--no-progress",
                              "--out", str(root / "X")])[0] == 1:
        assert left_in(root) == ["DATA"]


# --- mpspdz install and doctor: nothing is downloaded ------------------------------

@SMALL_BUDGET
@given(archive=st.sampled_from(["missing", "garbage", "dir", None]),
       url=st.sampled_from([None, None, None, "ftp://example.invalid/x"]),
       prefix=st.one_of(st.none(), out_name(), st.just("/etc/passwd/x")),
       force=st.booleans())
def test_mpspdz_install(tmp_path_factory, capsys, archive, url, prefix, force):
    root = tmp_path_factory.mktemp("install")
    (root / "garbage").write_bytes(b"\x00not a tarball")
    (root / "dir").mkdir()
    # Always an archive, never a download; a --url beside it is refused by argparse.
    argv = ["mpspdz", "install", "--archive", str(root / (archive or "garbage")),
            *(["--url", url] if url is not None else [])]
    if prefix is not None:
        argv += ["--prefix", prefix if prefix.startswith("/") else str(root / "p" / prefix)]
    with in_empty_dir(root / "dir"):
        assert check_outcome(capsys, [*argv, *(["--force"] if force else [])])[0] == 1
    assert left_in(root) == ["dir", "garbage"]


@SMALL_BUDGET
@given(where=st.sampled_from(["missing", "file", "empty-dir", None]), fix=st.booleans())
def test_doctor(tmp_path_factory, capsys, mp_spdz, where, fix):
    root = tmp_path_factory.mktemp("doctor")
    (root / "file").write_text("x")
    (root / "empty-dir").mkdir()
    argv = ["doctor", *(["--mp-spdz", str(root / where)] if where else []),
            *(["--fix"] if fix else [])]
    check_outcome(capsys, argv)


# --- hosts: broken inventories, so nothing connects ----------------------------------

BROKEN_INVENTORIES = {
    "missing": None,
    "empty": b"",
    "binary": b"\x00\xff\xfe",
    "not-utf8": b'known_hosts = "k"\n[[party]]\nname = "\xff"\n',
    "no-parties": b'known_hosts = "k"\n',
    "no-host": b'known_hosts = "k"\n[[party]]\nname = "a"\n',
    "bad-port": b'known_hosts = "k"\n[[party]]\nhost = "127.0.0.1"\nport = 99999\n'
                b'[[party]]\nhost = "127.0.0.1"\nport = 0\n',
    "torn": b"[[party",
}


@BUDGET
@given(action=st.sampled_from(["trust", "setup", "check"]),
       inventory=st.sampled_from(sorted(BROKEN_INVENTORIES)),
       timeout=st.one_of(st.none(), wild_number()),
       mode=st.sampled_from([None, "local", "release", "other"]),
       yes=st.booleans(), replace=st.booleans())
def test_hosts(tmp_path_factory, capsys, action, inventory, timeout, mode, yes, replace):
    root = tmp_path_factory.mktemp("hosts")
    path = root / "hosts.toml"
    content = BROKEN_INVENTORIES[inventory]
    if content is not None:
        path.write_bytes(content)
    argv = ["hosts", action, str(path)]
    if action == "trust":
        argv += [*(["--timeout", timeout] if timeout is not None else []),
                 *(["--replace"] if replace else [])]
    if action == "setup" and mode is not None:
        argv += ["--mp-spdz", mode, "--mp-spdz-dir", str(root / "none")]
    if action != "check" and yes:
        argv += ["--yes"]
    assert check_outcome(capsys, argv)[0] == 1  # every inventory here is broken


@BUDGET
@given(count=wild_number(), clients=st.one_of(st.none(), wild_number()),
       directory=st.one_of(st.none(), out_name()), stop=st.booleans())
def test_hosts_loopback(tmp_path_factory, capsys, monkeypatch, count, clients, directory,
                        stop):
    """No sshd here: every start is refused (a bad count first, else the missing
    server), and a stop finds no hosts; in one line, with nothing left behind."""
    loopback = importlib.import_module("harness.remote.loopback")
    root = tmp_path_factory.mktemp("loopback")
    monkeypatch.setattr(loopback, "SSHD", root / "no-sshd")
    monkeypatch.chdir(root)
    # Without --dir the hosts' directory is the user's state directory: never the real one.
    monkeypatch.setenv("XDG_STATE_HOME", str(root / "state"))
    before = sorted(root.iterdir())
    dir_args = ["--dir", directory] if directory is not None else []
    if stop:
        argv = ["hosts", "loopback", "stop", *dir_args]
    else:
        argv = ["hosts", "loopback", "start", count, *dir_args,
                *(["--client-hosts", clients] if clients is not None else [])]
    assert check_outcome(capsys, argv)[0] == 1
    assert sorted(root.iterdir()) == before


# --- aws, under moto ----------------------------------------------------------------

@pytest.fixture(scope="module")
def moto_aws(tmp_path_factory):
    """moto's EC2 behind infra.aws.make_session; no image, so a launch is refused."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    from _moto import PlacementGroups

    from harness import infra as aws

    home = tmp_path_factory.mktemp("aws")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
                     "AWS_ENDPOINT_URL_EC2", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            mp.delenv(name, raising=False)
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"),
                            ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_DEFAULT_REGION", "eu-west-1"),
                            ("AWS_CONFIG_FILE", str(home / "no-config")),
                            ("AWS_SHARED_CREDENTIALS_FILE", str(home / "no-credentials")),
                            ("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")):
            mp.setenv(name, value)
        with moto.mock_aws():
            session = boto3.Session(region_name="eu-west-1")
            PlacementGroups().install(session)  # which moto does not emulate
            mp.setattr(aws, "make_session", lambda profile, region: session)
            yield home


AWS_UP_OPTIONS = {
    "--parties": st.one_of(wild_number(), small_int(1, 4)),
    "--ssh-timeout": wild_number(),
    "--base-port": st.one_of(wild_number(), small_int(1000, 65535)),
    "--volume-size": st.one_of(wild_number(), small_int(1, 20)),
    "--client-hosts": st.one_of(wild_number(), small_int(0, 3)),
    "--cluster": st.sampled_from(["demo", "", "bad name!", "x" * 60]),
    "--ssh-cidr": st.sampled_from(["203.0.113.7/32", "0.0.0.0/0", "::1", "x"]),
    "--placement-strategy": st.sampled_from(["auto", "cluster", "spread", "moon"]),
    "--instance-type": st.sampled_from(["t3.large", "x.huge"]),
    "--ami": st.sampled_from(["ami-0000000000000dead", "nope"]),
}


@SMALL_BUDGET
@given(action=st.sampled_from(["up", "status", "down"]), args=options(AWS_UP_OPTIONS),
       cluster=st.sampled_from([None, "demo", "x" * 60]), everything=st.booleans(),
       yes=st.booleans())
def test_aws(tmp_path_factory, capsys, moto_aws, action, args, cluster, everything, yes):
    state = ["--state-dir", str(tmp_path_factory.mktemp("state"))]
    confirm = ["--yes"] if yes else []
    if action == "up":
        # --ssh-cidr always given: no lookup of this machine's address; no SSH, no setup.
        argv = ["aws", "up", "--ssh-cidr", "203.0.113.7/32", *args, *confirm, *state,
                "--no-wait-ssh", "--no-setup"]
    elif action == "status":
        argv = ["aws", "status", *(["--cluster", cluster] if cluster else [])]
    else:
        which = ["--all"] if everything else (["--cluster", cluster] if cluster else [])
        argv = ["aws", "down", *which, *confirm, *state]
    check_outcome(capsys, argv)
