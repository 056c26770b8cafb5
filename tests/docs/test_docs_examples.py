"""The documentation's examples run, and print what the pages show.

Every command of README.md's tour and every how-to command marked ``% quick``
(see ``_examples.py``) is run as written, at the size the page gives it, in a
fresh directory per page (commands on one page may use what earlier ones wrote),
against the real MP-SPDZ; the README's ``--hosts`` run starts its own OpenSSH
servers on loopback with ``ltm hosts loopback start`` and stops them, as a reader
would (any still running when a command fails are stopped here). Its output must
hold the lines the page shows.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _examples import ROOT, Example, doc_pages, examples, expected_pattern, missing_lines

from harness.remote import stop_loopback

pytestmark = [pytest.mark.mpspdz, pytest.mark.slow]

PAGES = [p for p in doc_pages() if examples(p)]


def _run(command: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[0] == "ltm", f"an example runs `ltm`, not {words[0]!r}: {command}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTM_NO_INSTALL": "1",
           "XDG_CACHE_HOME": str(cache), "COLUMNS": "100"}  # compile once per session
    return subprocess.run([sys.executable, "-m", "harness", *words[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in PAGES])
def test_the_page_s_examples_print_what_it_shows(page: Path, tmp_path: Path, mp_spdz,
                                                 program_cache) -> None:
    found: list[Example] = examples(page)
    work = tmp_path / "work"
    work.mkdir()
    try:
        for example in found:
            for command in example.commands:
                done = _run(command.text, work, program_cache)
                where = f"{example.page}:{command.line}: `{command.text}`"
                assert done.returncode == command.exit_status, (
                    f"{where} exited {done.returncode}, not {command.exit_status}:\n{done.stderr}")
                missing = missing_lines(command.shown, done.stdout)
                assert not missing, (f"{where} did not print these shown lines:\n  "
                                     + "\n  ".join(missing) + f"\nit printed:\n{done.stdout}")
        if page.name == "README.md":
            run = work / "results" / "tour-run"
            assert sorted(p.name for p in run.iterdir()) == sorted(tour_run_files()), (
                "README.md says what results/tour-run/ holds; the run wrote "
                f"{sorted(p.name for p in run.iterdir())}")
    finally:
        for left in work.rglob("loopback.json"):  # hosts a failed command left running
            stop_loopback(left.parent, echo=lambda line: None)


def tour_run_files() -> list[str]:
    """The files README.md says its tour's run writes: those its sentence
    "`results/tour-run/` holds ..." names, up to what it says is not there."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    start = text.index("`results/tour-run/` holds")
    sentence = text[start:text.index("The public sketch", start)]
    return re.findall(r"`([\w.-]+\.\w+)`", sentence)


def test_the_readme_tour_is_found() -> None:
    """Guards against a reader that finds nothing, which would pass whatever the pages say."""
    tour = examples(ROOT / "README.md")
    commands = [c.text for e in tour for c in e.commands]
    assert any(c.startswith("ltm run") and "--hosts" not in c for c in commands), commands
    assert any(c.startswith("ltm reproduce") for c in commands), commands
    assert any(c.startswith("ltm utility figure") for c in commands), commands
    assert any("--hosts" in c for c in commands), commands
    # The mechanisms compared: the central model's run beside the LTM's, and where the
    # whole comparison is.
    assert any(c.startswith("ltm run") and "--mechanism central" in c for c in commands)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "ltm reproduce mechanisms" in readme and "docs/results/mechanisms.md" in readme
    assert all(c.shown for e in tour for c in e.commands if c.text.startswith("ltm run"))
    # The --hosts run can be followed on one machine: the tour starts its hosts, pins
    # their keys, runs on the inventory it wrote, and stops them.
    steps = ("ltm hosts loopback start", "ltm hosts trust", "ltm run --hosts",
             "ltm hosts loopback stop")
    where = [[i for i, c in enumerate(commands) if c.startswith(step)] for step in steps]
    assert all(where), dict(zip(steps, where, strict=True))
    assert [w[0] for w in where] == sorted(w[0] for w in where), commands
    start, trust, run = (shlex.split(commands[w[0]]) for w in where[:3])
    inventory = Path(start[start.index("--dir") + 1]) / "hosts.toml"
    assert Path(trust[3]) == inventory and Path(run[run.index("--hosts") + 1]) == inventory
    assert "result.json" in tour_run_files() and len(tour_run_files()) >= 2, tour_run_files()
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
