"""Fixtures shared by the remote tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from _sshd import SshFarm


@pytest.fixture
def farm(tmp_path: Path):
    """Real sshd servers on loopback, each logged into as root; all stopped afterwards."""
    farm = SshFarm(tmp_path / "farm")
    try:
        yield farm
    finally:
        farm.close()
