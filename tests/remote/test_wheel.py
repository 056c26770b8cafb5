"""The wheel a host installs is pure Python: the compiled loops built here, for this
machine's Python, stay here."""

from __future__ import annotations

import zipfile
from pathlib import Path

from harness.clients import compiled_gaussian, compiled_sketch
from harness.remote.wheel import build_harness


def test_a_hosts_wheel_is_pure_python_and_carries_no_library_built_here(tmp_path: Path) -> None:
    # Built in place here: the wheel must leave them out.
    assert compiled_gaussian() and compiled_sketch()
    build = build_harness(tmp_path)
    assert build.wheel is not None and build.wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(build.wheel) as zf:
        names = zf.namelist()
    assert not [n for n in names if n.endswith(".so")]
