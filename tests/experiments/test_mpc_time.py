"""How long a run's MPC should take: the notice before a long central run and the
sweep estimate's charge for central's coins. (The per-coin figures the estimate
uses are measured by ``python -m benchmarks.mechanisms``, not by a timed test.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.experiments import ReproduceConfig, RunConfig
from harness.experiments.estimate import cell_cost
from harness.experiments.mpc_time import (
    CENTRAL_NS_PER_COIN,
    long_run_notice,
    mpc_seconds,
)
from harness.experiments.reproduce import plan_sweep
from harness.experiments.sweeps import expand, load_spec
from harness.experiments.workload import mechanism_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.mpspdz
def test_a_long_central_run_says_so_in_one_line_before_it_starts(tmp_path, mp_spdz):
    """spdz2k's coins cost about 1.7 ms each: 1,000 cells of 720 coins are some 20
    minutes, which the run says before it starts (then it is interrupted)."""
    argv = ["run", "--program", "local", "--mechanism", "central", "--protocol", "spdz2k",
            "--clients", "20000", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the notice comes first, flushed, before the run
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    cfg = RunConfig(out=tmp_path / "out", clients=20000, program="local",
                    mechanism="central", protocol="spdz2k").validate()
    noise = mechanism_for(cfg, 20000, 10, 1)
    expected = long_run_notice("spdz2k", "local", 20000 * 10, noise, 1000)
    assert expected is not None and first == expected + "\n", (first, err)
    assert first.startswith("note: this run's MPC should take about 2")  # 20-odd minutes
    assert "min (1,000 cells x 720 coins of central noise at about 1.7 ms a coin" in first
    assert "--epsilon" in first and "--protocol replicated-ring" in first
    assert not (tmp_path / "out").exists()


def test_a_short_run_says_nothing_and_the_notice_names_its_estimate():
    cfg = RunConfig(out=Path("unused"), clients=20000, program="local", mechanism="central",
                    protocol="semi2k").validate()
    noise = mechanism_for(cfg, 20000, 10, 1)
    assert long_run_notice("semi2k", "local", 200_000, noise, 1000) is None
    seconds = mpc_seconds("spdz2k", "local", 200_000, noise, 1000)
    assert seconds == pytest.approx(0.2 + 200_000 * 52e-9 + 1000 * noise.coins * 1.7e-3)


def test_the_sweep_estimate_charges_central_cells_their_coins():
    """``ltm reproduce mechanisms --estimate`` plans the sweep's central cells with the
    same per-coin cost as ``ltm run``'s notice, and leaves out what it would."""
    cfg = ReproduceConfig(tables="mechanisms", out=Path("."), repeat=3)
    cells = {(c.protocol, c.mechanism, c.epsilon, c.clients): c
             for c in expand(load_spec("mechanisms"))}
    for protocol in ("semi2k", "ps-rep-ring", "spdz2k"):
        central = cells[(protocol, "central", 1.0, 1_000_000)]
        ltm = cells[(protocol, "ltm", 1.0, 1_000_000)]
        extra = cell_cost(cfg, central).mpc_s - cell_cost(cfg, ltm).mpc_s
        # 1,000 cells of 720 coins
        assert extra == pytest.approx(1000 * 720 * CENTRAL_NS_PER_COIN[protocol] * 1e-9)
    planned, left_out = plan_sweep(cfg, ["mechanisms"])
    ran = {(c.protocol, c.mechanism, c.epsilon) for c, _ in planned}
    # spdz2k's central cell at epsilon 1 is about 20 minutes now; at 0.1 it is a day
    assert ("spdz2k", "central", 1.0) in ran and ("spdz2k", "central", 0.1) not in ran
    reasons = [r for per in left_out.values() for r in per]
    assert any("53,248 coins per cell" in r and "hours a run" in r for r in reasons), reasons


def test_the_progress_bar_shows_elapsed_against_the_estimate(tmp_path):
    """On a terminal, a long MPC shows its seconds against the estimate (MP-SPDZ
    prints nothing until the end); elsewhere, and for a short one, nothing."""
    from harness.experiments.mpc_time import mpc_progress

    class Terminal:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    term = Terminal()
    with mpc_progress(120.0, file=term):
        time.sleep(2.5)
    assert "MPC 2 s of about 120 s estimated" in term.text
    quiet = Terminal()
    with mpc_progress(5.0, file=quiet):
        time.sleep(1.2)
    assert quiet.text == ""
