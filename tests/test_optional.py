"""A host installs only the base dependencies: ``ltm`` works there without the extras.

The host is stood in for by a Python that cannot import pandas or matplotlib (the
``[analysis]`` extra) nor boto3 (``[aws]``): a finder in front of every other
refuses them, as a host whose pip never installed them would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_WITHOUT_EXTRAS = """
import sys
from importlib.abc import MetaPathFinder

class NoExtras(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pandas", "matplotlib", "boto3", "botocore"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoExtras())
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def ltm_without_extras(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS, *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [["--version"], ["mpspdz", "install", "--help"],
                                  ["run", "--help"], ["doctor", "--help"],
                                  ["hosts", "--help"], ["--help"]])
def test_what_hosts_run_needs_no_extra(argv):
    done = ltm_without_extras(*argv)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_the_extra_is_named_when_it_is_used():
    """The tables' module loads without pandas; its first use names what is missing."""
    probe = _WITHOUT_EXTRAS.split("from harness.cli import main")[0] + """
from harness.experiments.report import tables as report  # loads: pandas unused yet
try:
    report.pd.DataFrame
except ModuleNotFoundError as exc:
    print("missing", exc.name)
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "missing pandas"), done.stderr


def test_the_packages_load_their_exports_on_first_use():
    """Importing a package loads none of its modules; each export resolves to its own
    module's object, and a submodule imported later does not replace an export of
    the same name (``harness.experiments.run`` stays the function)."""
    probe = """
import importlib, sys, types
packages = ["harness.clients", "harness.engine", "harness.remote", "harness.experiments",
            "harness.analyst"]
for name in packages:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m.startswith("harness.") and m.count(".") == 2
             and not m.startswith("harness.remote.")))
import harness.experiments.run
import harness.analyst.audit
from harness.experiments import run
from harness.analyst import audit
print(type(run).__name__, type(audit).__name__)
missing = [f"{p}.{n}" for p in packages for n in importlib.import_module(p).__all__
           if not hasattr(importlib.import_module(p), n)]
print(missing)
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded, kinds, missing = done.stdout.splitlines()
    assert loaded == "[]", loaded
    assert kinds == "function function"
    assert missing == "[]"


def test_a_library_first_used_by_two_threads_at_once_is_whole_in_both():
    """The client hosts' upload threads parse CSV at once: pandas' first use, named
    lazily, from two threads. Each sees the whole library, and neither hangs."""
    probe = """
import threading
from harness.experiments import results  # names pandas lazily, as `ltm run` does
from harness.optional import lazy_import

lazy_import("pandas")
seen, go = [], threading.Barrier(2)

def use():
    go.wait()
    import pandas as pd
    seen.append(callable(getattr(pd, "read_csv", None)))

threads = [threading.Thread(target=use) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
print(seen)
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True]", done.stderr
