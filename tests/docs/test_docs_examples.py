"""The documentation's examples run, and print what the pages show.

Every command of README.md's tour and every how-to command marked ``% quick``
(see ``_examples.py``) is run as written, at the size the page gives it, in a
fresh directory per page (commands on one page may use what earlier ones wrote),
against the real MP-SPDZ and, for ``--hosts``, real OpenSSH servers on loopback
named by a ``hosts.toml`` there. Its output must hold the lines the page shows.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _examples import ROOT, Example, doc_pages, examples, expected_pattern, missing_lines
from _sshd import SshFarm, mpc_base_port, write_inventory_file

pytestmark = [pytest.mark.mpspdz, pytest.mark.slow]

PAGES = [p for p in doc_pages() if examples(p)]
# The --hosts example logs into loopback sshd servers as root.
NEEDS_HOSTS = {p for p in PAGES if "hosts.toml" in p.read_text(encoding="utf-8")}


def _hosts_file(where: Path, farm: SshFarm, mp_root: Path) -> None:
    """hosts.toml: two loopback sshd hosts with the harness, as after `ltm hosts setup`."""
    fakes = [farm.add(f"p{i}", harness=True) for i in range(2)]
    hosts = [f.as_host(farm.client_key, mp_root) for f in fakes]
    write_inventory_file(where / "hosts.toml", hosts, mpc_base_port(2))


def _run(command: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[0] == "ltm", f"an example runs `ltm`, not {words[0]!r}: {command}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTM_NO_INSTALL": "1",
           "XDG_CACHE_HOME": str(cache), "COLUMNS": "100"}  # compile once per session
    return subprocess.run([sys.executable, "-m", "harness", *words[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("page", [
    pytest.param(p, id=str(p.relative_to(ROOT)),
                 marks=[pytest.mark.root] if p in NEEDS_HOSTS else [])
    for p in PAGES])
def test_the_page_s_examples_print_what_it_shows(page: Path, tmp_path: Path, mp_spdz,
                                                 program_cache) -> None:
    found: list[Example] = examples(page)
    work = tmp_path / "work"
    work.mkdir()
    farm = None
    try:
        if page in NEEDS_HOSTS:
            if os.geteuid() != 0:
                pytest.fail("the --hosts example logs into loopback sshd servers as root: "
                            "run this test as root (CI does)")
            farm = SshFarm(tmp_path / "farm")
            _hosts_file(work, farm, mp_spdz.root)
        for example in found:
            for command in example.commands:
                done = _run(command.text, work, program_cache)
                where = f"{example.page}:{command.line}: `{command.text}`"
                assert done.returncode == command.exit_status, (
                    f"{where} exited {done.returncode}, not {command.exit_status}:\n{done.stderr}")
                missing = missing_lines(command.shown, done.stdout)
                assert not missing, (f"{where} did not print these shown lines:\n  "
                                     + "\n  ".join(missing) + f"\nit printed:\n{done.stdout}")
    finally:
        if farm is not None:
            farm.close()


def test_the_readme_tour_is_found() -> None:
    """Guards against a reader that finds nothing, which would pass whatever the pages say."""
    tour = examples(ROOT / "README.md")
    commands = [c.text for e in tour for c in e.commands]
    assert any(c.startswith("ltm run") and "--hosts" not in c for c in commands), commands
    assert any(c.startswith("ltm reproduce") for c in commands), commands
    assert any(c.startswith("ltm utility figure") for c in commands), commands
    assert any("--hosts" in c for c in commands), commands
    assert all(c.shown for e in tour for c in e.commands if c.text.startswith("ltm run"))
    quick = [e for p in doc_pages() if p.name != "README.md" for e in examples(p)]
    assert len(quick) >= 4, [e.page for e in quick]


def test_shown_lines_match_as_documented() -> None:
    pattern = expected_pattern("T_MPC 0.079 s (slowest party); C_MPC 16.016 MB (model ...)")
    assert pattern.fullmatch("T_MPC 1.5 s (slowest party); C_MPC 3 MB (model 16.016 MB)")
    assert not pattern.fullmatch("T_MPC 1.5 s (fastest party); C_MPC 3 MB (model 1 MB)")
    assert missing_lines(["a 1", "b 2"], "x\na 7\ny\nb 3.5\n") == []
    assert missing_lines(["b 2", "a 1"], "a 7\nb 3.5\n") == ["a 1"]
    audit = [c for e in examples(ROOT / "docs" / "howto" / "audit.md") for c in e.commands]
    assert [c.exit_status for c in audit] == [0, 3], audit
