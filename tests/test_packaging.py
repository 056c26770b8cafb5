"""The wheel: what it installs, and under which names.

infra/ is installed as harness.infra and benchmarks/ not at all, so an
installed harness claims no generic top-level name; the sweep specs travel
as package data of harness.experiments. The wheel is built from the source
distribution, as pip builds it from one: a file the sdist leaves out is
missing from the wheel too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "harness",
            "infra", "mpc_programs", "benchmarks")


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in _SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.pyc", "*.so", "reproduction"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}
    done = subprocess.run([sys.executable, "-c", "import sys; from setuptools import "
                           "build_meta; build_meta.build_sdist(sys.argv[1])", str(tmp / "sdist")],
                          cwd=src, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    (sdist,) = (tmp / "sdist").glob("*.tar.gz")
    shutil.unpack_archive(sdist, tmp / "unpacked")
    (unpacked,) = (tmp / "unpacked").iterdir()
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
                           str(unpacked)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp / "dist").glob("ltm_harness-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_installs_no_top_level_infra_or_benchmarks(wheel_files: list[str]) -> None:
    top = {name.split("/")[0] for name in wheel_files}
    assert {t for t in top if not t.endswith(".dist-info")} == {"harness", "mpc_programs"}
    assert "harness/infra/__init__.py" in wheel_files
    assert "harness/infra/aws/provision.py" in wheel_files


def test_every_package_of_the_tree_is_in_the_wheel(wheel_files: list[str]) -> None:
    # pyproject.toml lists the packages: a new one must be added there.
    expected = {f"harness/{p.relative_to(ROOT / 'harness').as_posix()}"
                for p in (ROOT / "harness").rglob("*.py") if "__pycache__" not in p.parts}
    expected |= {f"harness/infra/{p.relative_to(ROOT / 'infra').as_posix()}"
                 for p in (ROOT / "infra").rglob("*.py") if "__pycache__" not in p.parts}
    missing = expected - set(wheel_files)
    assert not missing, f"add their packages to [tool.setuptools] packages: {sorted(missing)}"


def test_the_specs_and_templates_are_package_data(wheel_files: list[str]) -> None:
    specs = {"security.toml", "table3.toml", "table4.toml", "table5.toml", "paper_tables.csv"}
    assert {f"harness/experiments/specs/{s}" for s in specs} <= set(wheel_files)
    assert "mpc_programs/fast.mpc.j2" in wheel_files
    # .dist-info/LICENSE, or .dist-info/licenses/LICENSE with a newer setuptools
    licences = [n for n in wheel_files if ".dist-info/" in n and n.endswith("/LICENSE")]
    assert licences, "the MIT LICENSE travels in the wheel's metadata"


@pytest.mark.parametrize("library", ["clients/_gaussian", "clients/_sketch", "stream/_blocks"])
def test_the_wheel_builds_the_compiled_loops(wheel_files: list[str], library: str) -> None:
    # From the C sources alone (the copy leaves out a library built in place), and
    # from the sdist: the sampler's tables header must travel in it.
    assert [n for n in wheel_files
            if n.startswith(f"harness/{library}.") and n.endswith(".so")]
