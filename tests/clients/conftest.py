"""What the tests of the compiled loops share."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def libraries(tmp_path: Path) -> Callable[[str], list[Path]]:
    """Libraries a loader must leave unloaded: one built from ``source`` (an older
    convention), and a file that is no library at all."""

    def build(source: str) -> list[Path]:
        (tmp_path / "old.c").write_text(source)
        built = tmp_path / "old.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(built), str(tmp_path / "old.c")],
                       check=True)
        (tmp_path / "junk.so").write_bytes(b"not a library")
        return [built, tmp_path / "junk.so"]

    return build
