"""The examples the documentation shows, read from its Markdown.

An example is a ``console`` code block: lines ``$ ltm ...`` are commands, the
lines after each, up to the next command, the output the page shows for it. Every
such block of README.md is one (the five-minute tour); on the pages under docs/
a block is one when the line before its fence is the MyST comment ``% quick``
(a how-to command small enough to run in a test). In a shown line every number
stands for any number (times vary) and ``...`` for any text; a last shown line
``(exit N)`` is the exit status the command must end with (else 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Command", "Example", "ROOT", "doc_pages", "examples", "expected_pattern",
           "missing_lines"]

ROOT = Path(__file__).resolve().parents[2]
QUICK = "% quick"

_NUMBER = r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:e[-+]?\d+)?"


@dataclass
class Command:
    line: int
    text: str
    shown: list[str] = field(default_factory=list)
    exit_status: int = 0


@dataclass
class Example:
    page: str
    line: int
    commands: list[Command]


def doc_pages() -> list[Path]:
    """README.md, ARCHITECTURE.md and every Markdown page of the docs site."""
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md",
            *sorted((ROOT / "docs").rglob("*.md"))]


def examples(path: Path) -> list[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    every = path.name == "README.md"
    found: list[Example] = []
    previous = ""
    k = 0
    while k < len(lines):
        line = lines[k]
        if re.match(r"\s*(```|~~~)", line):
            fence = line.strip()[:3]
            start = k
            body: list[str] = []
            k += 1
            while k < len(lines) and not lines[k].strip().startswith(fence):
                body.append(lines[k])
                k += 1
            if line.strip()[3:].strip() == "console" and (every or previous == QUICK):
                found.append(Example(str(path.relative_to(ROOT)), start + 1,
                                     _commands(body, start + 2)))
        if line.strip():
            previous = line.strip()
        k += 1
    return found


def _commands(body: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    for n, line in enumerate(body, first_line):
        if line.startswith("$ "):
            commands.append(Command(n, line[2:].strip()))
        elif commands and line.strip():
            commands[-1].shown.append(line.rstrip())
    for command in commands:
        status = re.fullmatch(r"\(exit (\d+)\)", command.shown[-1].strip()) \
            if command.shown else None
        if status:
            command.shown.pop()
            command.exit_status = int(status.group(1))
    return commands


def expected_pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: numbers stand for any number, ``...`` for any text."""
    parts = re.split(rf"(\.\.\.|{_NUMBER})", shown.strip())
    out = []
    for k, part in enumerate(parts):
        if k % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(".*" if part == "..." else _NUMBER)
    return re.compile("".join(out))


def missing_lines(shown: list[str], output: str) -> list[str]:
    """The shown lines that the output lacks, in order (each after the one before)."""
    got = [line.strip() for line in output.splitlines()]
    pos = 0
    missing = []
    for line in shown:
        pattern = expected_pattern(line)
        hit = next((i for i in range(pos, len(got)) if pattern.fullmatch(got[i])), None)
        if hit is None:
            missing.append(line)
        else:
            pos = hit + 1
    return missing
