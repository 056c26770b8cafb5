"""``ltm`` answers at once: what its start-up imports, how it words a usage error,
what its help says, and a stop signal while it starts.

Start-up speed itself is measured, paired, by ``benchmarks/cli_startup.py``; here
the outcome that makes it fast is checked: which modules a real ``ltm`` process
has imported when it has answered.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _procs import children

from harness.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]

# Report, after main() has answered, the real modules (not lazy placeholders) loaded.
_PROBE = """
import json, sys
from harness.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
real = sorted(name for name, module in sys.modules.items()
              if not type(module).__name__.startswith(("_Lazy", "_Missing")))
print(json.dumps(real), file=sys.stderr)
"""
# Libraries that take a second or more between them, which no help text needs.
_HEAVY = ("scipy", "pandas", "matplotlib", "dp_accounting", "boto3", "paramiko")
# What a local run's start has no use for, milliseconds to tens of them before its clients
# start: the hosts inventory's package and TOML parser (only --hosts reads one), and a
# thread pool with its logging (only --input party's writer uses one).
_NOT_ON_THE_RUN_PATH = ("harness.remote", "tomllib", "concurrent", "logging")


def imported_by(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    return set(json.loads(done.stderr.splitlines()[-1]))


def test_help_and_version_import_no_command() -> None:
    for argv in (["--help"], ["--version"], ["no-such-command"]):
        modules = imported_by(*argv)
        ours = {m for m in modules if m.startswith("harness")}
        assert ours <= {"harness", "harness._version", "harness.errors", "harness.cli"}, (
            argv, sorted(ours))
        assert "numpy" not in modules, argv


@pytest.mark.parametrize("command", ["run", "reproduce", "analyze", "utility", "audit", "aws",
                                     "hosts", "doctor", "mpspdz"])
def test_a_commands_help_imports_no_heavy_library(command: str) -> None:
    modules = imported_by(command, "--help")
    heavy = sorted(m for m in modules if m.partition(".")[0] in _HEAVY)
    assert not heavy, (command, heavy[:5])
    # the run path (execution, placement, MP-SPDZ's processes) is not loaded to parse
    assert "harness.experiments.execute" not in modules, command


@pytest.mark.mpspdz
def test_a_second_run_imports_no_heavy_library(tmp_path, mp_spdz) -> None:
    """Once the accountant's certificate is cached, a run's whole path (the stream, the
    MPC, verification, the result and its noise's released variance) loads none of
    them: scipy alone took longer than the MPC at n = 1e6."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ["run", "--clients", "20000", "--program", "local", "--seed", "4", "--out"]
    imported_by(*argv, str(tmp_path / "first"), env=env)  # certifies, compiles
    modules = imported_by(*argv, str(tmp_path / "second"), env=env)
    assert (tmp_path / "second" / "result.json").is_file()
    heavy = sorted(m for m in modules if m.partition(".")[0] in _HEAVY)
    assert not heavy, heavy[:5]
    needless = sorted(m for m in modules if m.startswith(_NOT_ON_THE_RUN_PATH))
    assert not needless, needless[:5]


# `ltm` as a program (console(), as its entry point runs it): the modules its own process
# had loaded when it exited.
_CONSOLE_PROBE = """
import atexit, json, sys
from harness.cli import console
atexit.register(lambda: print(json.dumps(sorted(
    name for name, module in sys.modules.items()
    if not type(module).__name__.startswith(("_Lazy", "_Missing")))), file=sys.stderr))
sys.argv = ["ltm", *sys.argv[1:]]
console()
"""


@pytest.mark.mpspdz
def test_a_runs_own_process_loads_no_x509_nor_aes(tmp_path, mp_spdz) -> None:
    """The parties' certificates come from the signer forked as ``ltm`` starts, and the
    masks and the sketch's words are drawn by the client workers: ``ltm run``'s own
    process spends none of its start loading what they need."""
    done = subprocess.run([sys.executable, "-c", _CONSOLE_PROBE, "run", "--clients", "20000",
                           "--program", "local", "--seed", "4", "--out", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verified: yes, bit-exact" in done.stdout and (tmp_path / "r" / "result.json").is_file()
    modules = set(json.loads(done.stderr.splitlines()[-1]))
    assert "harness.engine.certs" in modules  # it did make certificates
    assert not {"cryptography.x509", "cryptography.hazmat.primitives.ciphers"} & modules


# The BLAS threads of `ltm`'s own process, and those its fork server was started with.
_BLAS_PROBE = """
import atexit, json, multiprocessing.forkserver as fs, os, sys
from harness.cli import console
def report():
    from threadpoolctl import threadpool_info
    with open(f"/proc/{fs._forkserver._forkserver_pid}/environ", "rb") as fh:
        env = dict(v.split(b"=", 1) for v in fh.read().split(b"\\0") if b"=" in v)
    print(json.dumps({"ltm": [p["num_threads"] for p in threadpool_info()
                              if p["internal_api"] == "openblas"],
                      "fork server": env.get(b"OPENBLAS_NUM_THREADS", b"").decode()}),
          file=sys.stderr)
atexit.register(report)
sys.argv = ["ltm", *sys.argv[1:]]
console()
"""


@pytest.mark.mpspdz
@pytest.mark.parametrize("users", [None, "2"])
def test_a_run_and_its_streams_processes_start_one_blas_thread(tmp_path, mp_spdz, users):
    """numpy's OpenBLAS starts a thread per core, which spin at import for about 0.15 s
    of CPU beside the other process's imports; a run multiplies no large matrix. A
    value the user set is theirs."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if users:
        env["OPENBLAS_NUM_THREADS"] = users
    done = subprocess.run([sys.executable, "-c", _BLAS_PROBE, "run", "--clients", "2000",
                           "--program", "local", "--seed", "4", "--out", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    threads = json.loads(done.stderr.splitlines()[-1])
    want = users or "1"
    assert threads == {"ltm": [int(want)], "fork server": want}


def _importing_numpy(pid: int) -> bool:
    """Whether a fork server child of ``pid`` has mapped numpy's core library."""
    for child, cmd in children(pid):
        if "multiprocessing.forkserver" in cmd:
            try:
                with open(f"/proc/{child}/maps") as fh:
                    if "_multiarray_umath" in fh.read():
                        return True
            except OSError:
                continue
    return False


def test_ctrl_c_while_a_run_and_its_fork_server_start_is_one_line(tmp_path) -> None:
    """``ltm run`` starts the stream's fork server before it loads its own modules; a
    Ctrl-C (the whole process group's) while that server imports what it preloads is
    ltm's one line, with no traceback from the fork server beside it."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--clients", "2000",
                             "--out", str(tmp_path / "out")], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _importing_numpy(proc.pid):  # the fork server, in its preload's imports
            assert proc.poll() is None and time.monotonic() < deadline, "no fork server"
            time.sleep(0.002)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip() == "ltm: interrupted by SIGINT", err
    assert proc.returncode == 128 + signal.SIGINT
    assert not (tmp_path / "out").exists()


_ATEXIT = """
import atexit, sys, threading, time
from harness.cli import console
atexit.register(lambda: print("atexit ran"))  # unflushed: the exit flushes it
sys.stdout.write("unflushed before main\\n")
threading.Thread(target=lambda: (time.sleep(1), print("thread done"))).start()
sys.argv = ["ltm", *sys.argv[1:]]
console()
"""


@pytest.mark.parametrize("status", [0, 1])
def test_ltm_exits_with_mains_status_after_its_threads_and_atexit(tmp_path, status) -> None:
    """The program skips the interpreter's teardown, not what an exit must do: wait for
    running threads, run the atexit handlers, flush what was printed. (`ltm analyze`:
    a command that returns its status, on a run directory or on none.)"""
    run = tmp_path / "run"
    if status == 0:
        run.mkdir()
        rows = np.random.default_rng(1).uniform(-1, 1, (50, 3))
        np.save(run / "data.npy", rows)
        np.save(run / "output.npy", rows[:5])
        (run / "result.json").write_text(json.dumps({"n": 50, "d": 3, "m": 5, "s": 1}))
    done = subprocess.run([sys.executable, "-c", _ATEXIT, "analyze", "lowrank", "--k", "1",
                           str(run)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == status, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "unflushed before main" and lines[-1] == "atexit ran"
    assert "thread done" in lines
    assert ("psi = " in done.stdout) if status == 0 else ("does not exist" in done.stderr)


# --- usage errors -----------------------------------------------------------------


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_usage_error_names_ltm_once_and_the_commands_own_help(capsys) -> None:
    assert _error(capsys, ["--bogus"]) == (
        "ltm: error: unrecognized arguments: --bogus (see `ltm --help`)")
    assert _error(capsys, ["run", "--bogus"]) == (
        "ltm: error: unrecognized arguments: --bogus (see `ltm run --help`)")
    err = _error(capsys, ["analyze", "lowrank", "DIR", "--bogus"])
    assert err.endswith("(see `ltm analyze lowrank --help`)"), err
    assert not err.startswith("ltm: error: ltm"), err


def test_no_option_is_taken_by_a_prefix(capsys) -> None:
    err = _error(capsys, ["run", "--client", "5"])
    assert "unrecognized arguments: --client 5" in err, err
    # every parser of every command refuses prefixes: argparse's subparsers are made
    # one by one, and one made without the setting would take them again
    parsers, todo = [], [build_parser()]
    while todo:
        parser = todo.pop()
        parsers.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += dict.fromkeys(action.choices.values())
    assert len(parsers) > 15
    assert [p.prog for p in parsers if p.allow_abbrev] == []


# --- help texts ------------------------------------------------------------------------


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_reproduce_help_shows_that_out_or_estimate_is_required(capsys) -> None:
    usage = " ".join(_help(capsys, "reproduce").split())
    assert "(--out DIR | --estimate)" in usage, usage
    assert "[--out DIR]" not in usage
    assert _error(capsys, ["reproduce", "table3"]) == (
        "ltm: error: one of the arguments --out --estimate is required (see `ltm reproduce "
        "--help`)")


def test_utility_help_states_each_default_once(capsys) -> None:
    for argv in (["utility"], ["utility", "table6"], ["utility", "figure"]):
        text = " ".join(_help(capsys, *argv).split())
        assert "(default: .) (default: .)" not in text, argv
    assert "output directory (default: .)" in " ".join(_help(capsys, "utility").split())


# --- a stop signal during start-up -------------------------------------------------------

# Holds the start-up where it loads the command's module (where the seconds went
# before the parser was lazy), says so on stdout, and lets the signal arrive there.
_SLOW_START = """
import sys, time
from importlib.abc import MetaPathFinder

class Slow(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "harness.cli.run":
            print("loading", flush=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.05)
        return None

sys.meta_path.insert(0, Slow())
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_signal_while_starting_is_an_interruption_not_a_traceback(sig) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_START, "run", "--help"], cwd=ROOT,
                            env=os.environ.copy(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "loading"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    assert err.strip() == f"ltm: interrupted by {sig.name}", err
    assert proc.returncode == 128 + sig
