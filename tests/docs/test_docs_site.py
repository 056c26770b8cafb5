"""The docs site: it builds with warnings as errors, names only real options, and renders.

The build is the one CI runs (``python3 -m sphinx -W --keep-going``); the rendered
pages are opened in headless Chromium (Debian's ``chromium``, which ``.ci/run``
installs), and the CLI reference must show the title and every option of
``ltm run``, read from the real parser, so the generated table is really there.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _examples import ROOT, doc_pages

from harness.cli import build_parser

CHROMIUM = "chromium"


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def _subparser(*words: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def _named_options(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, option, value) of every inline code span in prose that starts with an
    option; value is the word after it when that is a literal (``--noise skellam``),
    not a placeholder (``--out DIR``)."""
    found = []
    fence = None
    span = re.compile(r"(?<!`)`(--[a-z][a-z0-9-]*)(?:[ =]([a-z0-9][a-z0-9.-]*))?[^`]*`")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        marker = re.match(r"\s*(```|~~~)", line)
        if marker and (fence is None or marker.group(1) == fence):
            fence = marker.group(1) if fence is None else None
            continue
        if fence is None:
            found += [(n, m.group(1), m.group(2)) for m in span.finditer(line)]
    return found


def test_every_option_a_page_names_exists() -> None:
    """`--option` in a page's prose is an option of some `ltm` command (full commands
    are parsed whole by tests/cli/test_commands_quoted.py)."""
    actions: dict[str, list[argparse.Action]] = {}
    for parser in _parsers(build_parser()):
        for string, action in parser._option_string_actions.items():
            actions.setdefault(string, []).append(action)
    pages = [*doc_pages(), ROOT / "benchmarks" / "README.md"]  # the Results pages include it
    named = [(page, *found) for page in pages for found in _named_options(page)]
    assert len(named) >= 100, len(named)  # the reader finds them
    wrong = []
    for page, n, option, value in named:
        where = f"{page.relative_to(ROOT)}:{n}: `{option}{' ' + value if value else ''}`"
        if option not in actions:
            wrong.append(f"{where}: no `ltm` command has {option}")
        elif value and all(a.choices for a in actions[option]) and not any(
                value in a.choices for a in actions[option]):
            wrong.append(f"{where}: no `ltm` command's {option} takes {value}")
    assert not wrong, "pages name options the parser does not have:\n  " + "\n  ".join(wrong)


def test_the_option_reader_finds_prose_options_only(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("Use `--sharing seeded` or `--nope`, `--out DIR`.\n```sh\nx `--fenced`\n```\n"
                    "``--x``\n")
    assert _named_options(page) == [(1, "--sharing", "seeded"), (1, "--nope", None),
                                    (1, "--out", None)]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                           "-b", "html", str(ROOT / "docs"), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, f"the docs build failed:\n{done.stderr}"
    return out


def _chromium(*args: str) -> str:
    if shutil.which(CHROMIUM) is None:
        pytest.fail("headless Chromium is needed to check the rendered docs: "
                    "apt-get install chromium (.ci/run does)", pytrace=False)
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--window-size=1280,1800", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _text(dom: str) -> str:
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", dom).replace("&nbsp;", " ").split())


def test_the_site_renders_in_a_browser(site: Path) -> None:
    index = _chromium("--dump-dom", (site / "index.html").as_uri())
    assert re.search(r"<title>ltm-harness [^<]*</title>", index), index[:500]
    text = _text(index)
    for heading in ("Getting started", "Concepts", "How-to guides", "Reference", "Results",
                    "Guarantees", "Development"):
        assert heading in text, heading

    cli = _chromium("--dump-dom", (site / "reference" / "cli.html").as_uri())
    assert "<title>Command line: ltm" in cli, cli[:500]
    run = re.search(r'<section id="ltm-run">(.*?)<section id="ltm-doctor">', cli, re.S)
    assert run, "the CLI reference has no `ltm run` section"
    shown = _text(run.group(1))
    options = [s for a in _subparser("run")._actions for s in a.option_strings
               if s.startswith("--") and s != "--help"]
    assert len(options) >= 25, options
    missing = [o for o in options if o not in shown]
    assert not missing, f"`ltm run`'s rendered option table lacks {missing}"
    # every subcommand, nested ones too, has its section
    for parser in _parsers(build_parser()):
        anchor = parser.prog.replace(" ", "-")
        assert f'id="{anchor}"' in cli, f"no section for `{parser.prog}`"


def test_a_screenshot_is_taken(site: Path, tmp_path: Path) -> None:
    shot = tmp_path / "cli.png"
    _chromium(f"--screenshot={shot}", (site / "reference" / "cli.html").as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, len(data)
