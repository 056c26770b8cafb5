"""Every script in benchmarks/ runs, at its smallest size (``--smoke``), as a user runs it.

The scripts are found by listing the directory, so a new one cannot be left out: a
script without ``--smoke``, or whose JSON is not listed in :data:`REPORTS`, fails
here. Each runs as ``python -m benchmarks.NAME --smoke --json FILE`` in a real
subprocess, against the real MP-SPDZ (sshd on loopback for ``hosts``, network
namespaces for ``clients``' end-to-end runs), and must exit 0 with its JSON's keys.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                    if not p.name.startswith("_"))

# What each benchmark's --json holds, at least.
REPORTS = {
    "cell": {"parameters", "runs", "medians", "tree_ratios", "program_ratios"},
    "cli_startup": {"load", "help", "run"},
    "clients": {"metadata", "workload", "samples", "medians", "upload_bytes", "end_to_end",
                "ratios"},
    "hosts": {"base", "big", "layouts"},
    "mechanisms": {"parameters", "metadata", "protocols"},
    "modes_memory": {"target", "sizes", "combinations", "ran", "within", "worst_ratio"},
    "noise_rng": {"generator", "draws", "repeat", "normal", "poisson"},
    "peak_memory": {"command", "exit", "wall_s", "peak_pss_bytes"},
    "prg": {"clients", "repeat", "us_per_client"},
    "programs": {"parameters", "metadata", "times"},
    "protocols": {"parameters", "metadata", "times"},
    "sampler": {"workload", "repeat", "samples", "medians", "ratio", "four_over_one"},
    "scale": {"kernel_floor", "runs", "floor_ratio", "peak_ratio", "peak_big_gib"},
    "stream_local": {"workload", "repeat", "samples", "medians", "ratio"},
    "stream_read": {"mib", "repeat", "seconds"},
    "validation": {"parameters", "metadata", "medians", "per_client", "ratios", "scale"},
}
# clients' end-to-end runs cross an emulated network: namespaces need root.
NEEDS_ROOT = {"clients"}


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return []


def test_the_benchmarks_are_found() -> None:
    assert {"programs", "protocols", "hosts", "scale"} <= set(BENCHMARKS), BENCHMARKS


@pytest.mark.mpspdz
@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.root] if n in NEEDS_ROOT else []) for n in BENCHMARKS])
def test_the_benchmark_runs_at_its_smallest_size(name: str, tmp_path: Path, mp_spdz,
                                                 program_cache) -> None:
    assert name in REPORTS, (f"benchmarks/{name}.py is new: give it --smoke (see "
                             "benchmarks/_cli.py) and list its JSON's keys in REPORTS here")
    if name in NEEDS_ROOT and os.geteuid() != 0:
        pytest.fail(f"benchmarks.{name} needs root (network namespaces): run as root (CI does)")
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTM_NO_INSTALL": "1",
           "MP_SPDZ_HOME": str(mp_spdz.root), "XDG_CACHE_HOME": str(program_cache)}
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke",
                           "--json", str(report)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"benchmarks.{name} --smoke exited {done.returncode}:\n" \
                                 f"{done.stderr[-3000:]}"
    assert (done.stdout + done.stderr).strip(), "it printed no report"
    result = json.loads(report.read_text())
    missing = REPORTS[name] - set(result)
    assert not missing, f"benchmarks.{name}'s JSON lacks {sorted(missing)}: {sorted(result)}"
    figures = _numbers(result)
    assert figures and all(math.isfinite(x) for x in figures), figures


def test_cli_startups_baseline_runs_the_baselines_code(tmp_path: Path) -> None:
    """``cli_startup.py --baseline DIR`` times DIR's harness, although it is started from
    this checkout (where ``python -m harness`` would otherwise import this one's)."""
    from benchmarks import cli_startup

    other = tmp_path / "other"
    (other / "harness").mkdir(parents=True)
    (other / "harness" / "__init__.py").write_text("")
    (other / "harness" / "__main__.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').write('the baseline')\n")
    env = {**os.environ, "PYTHONPATH": str(other)}
    cli_startup._wall([sys.executable, "-m", "harness", "--help"], env)
    assert (tmp_path / "ran").read_text() == "the baseline"
