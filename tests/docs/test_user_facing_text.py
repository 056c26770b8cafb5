"""Everything a user reads speaks of the project alone.

Pages (README.md, ARCHITECTURE.md, docs/, the benchmarks' READMEs and committed
reports), every string literal of the package (messages, help texts, docstrings that
become the API reference, plot labels), the MPC programs, the sweep specifications,
the text inside committed SVGs and the text chunks of committed PNGs must not name
paths of the machine the project was written on, the project's internal tracking
(issue, session or stop numbers) or how its work was organised. The paper is cited
as arXiv:2412.00497 with its section names.
"""

from __future__ import annotations

import ast
import re
import subprocess
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What a user cannot resolve or should never read: each with the reason it names.
FORBIDDEN: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?<![\w.])/work/"), "a path of the machine the project was written on"),
    (re.compile(r"(?<![\w.])/root/"), "a path in root's home directory"),
    # A remote host's login user of the AWS images is the user's own path, not ours.
    (re.compile(r"(?<![\w.])/home/(?!ubuntu/)[\w.-]+/"), "a path in someone's home directory"),
    (re.compile(r"\.\./shared\b|\bshared/(?:tools|paper)\b"),
     "a file outside the repository"),
    (re.compile(r"\b(?:issue|session|stop|sprint|ticket|milestone)s?\s*#\s*\d+", re.I),
     "an internal tracking number"),
    (re.compile(r"\b(?:issue|session|stop|sprint|ticket|milestone)s?\s+\d+\b", re.I),
     "an internal tracking number"),
    (re.compile(r"\b(?:PR|pull request)\s*#?\d+", re.I), "an internal tracking number"),
    (re.compile(r"\bthis (?:session|sprint)\b|\bstretch of work\b|\bmeasured for\b"
                r"|\bon (?:its|their|a|my|our) (?:own )?branch\b|\bother engineers\b"
                r"|\bCEO\b|\bthe brief\b|\bhelper (?:session|agent)s?\b"
                r"|\b(?:the|this|that) issue's\b|\bas in the issue\b", re.I),
     "words about how the work was organised"),
    (re.compile(r"secure-sketching\.tex"), "the paper's source file (cite arXiv:2412.00497)"),
    # Published examples write beside the user's working directory, never to a root
    # of ours; /dev/shm is a system path every Linux user has.
    (re.compile(r"--(?:out|json)[ =]/(?!dev/shm\b)"), "an output path under a root of ours"),
]


def problems(text: str) -> list[tuple[int, str, str]]:
    """(line, the offending text, why) for every forbidden reference in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern, why in FORBIDDEN:
            for hit in pattern.finditer(line):
                found.append((number, hit.group(0), why))
    return found


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return sorted(ROOT / p for p in out.split("\0") if p and (ROOT / p).is_file())


def pages() -> list[Path]:
    """The text files a user reads as they are."""
    return _tracked("README.md", "ARCHITECTURE.md", "docs/**.md", "docs/**.py",
                    "benchmarks/**.md", "benchmarks/**.tex", "mpc_programs/**",
                    "harness/experiments/specs/**", "pyproject.toml")


def sources() -> list[Path]:
    """The Python files whose string literals a user reads (messages, help, docstrings)."""
    return _tracked("harness/**.py", "infra/**.py", "benchmarks/*.py", "mpc_programs/**.py")


def literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal; an f-string's fields read as ``{}``."""
    found, parts = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                           for v in node.values)
            found.append((node.lineno, text))
            parts.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in parts:
            found.append((node.lineno, node.value))
    return found


def svg_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def png_text(data: bytes) -> str:
    """The text chunks (tEXt, zTXt, iTXt) of a PNG, one per line."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, lines = 8, []
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"tEXt":
            lines.append(body.replace(b"\0", b": ").decode("latin-1"))
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            lines.append(f"{key.decode('latin-1')}: "
                         f"{zlib.decompress(rest[1:]).decode('latin-1')}")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            rest = rest.split(b"\0", 2)[2]  # past the language tag and translated key
            lines.append(f"{key.decode('latin-1')}: "
                         + (zlib.decompress(rest) if compressed else rest).decode("utf-8"))
        pos += 12 + length
    return "\n".join(lines)


def _report(where: str, found: list[tuple[int, str, str]]) -> list[str]:
    return [f"{where}:{line}: {text!r} ({why})" for line, text, why in found]


# --- the scanner catches what it must, and only that ---------------------------------

@pytest.mark.parametrize("planted", [
    "Paper references are to `/work/shared/paper/secure-sketching.tex`.",
    "ltm reproduce all --program fast --repeat 10 --out /work/repro/fast",
    "python3 ../shared/tools/peak_tree.py -- ltm run",
    "the shared/tools scripts",
    "MP-SPDZ v0.4.2, measured for issue 10",
    "## `scale.py`: the clients at population scale (issue 20)",
    "rerun on the final code of issue 20's third session",
    "see issue #13",
    "as fixed in Issue 7",
    "this was done in session 8",
    "stop 3 of the work",
    "during this session the sweep ran",
    "in the last stretch of work",
    "measured on its branch while the machine was loaded",
    "beside other engineers' test runs",
    "about the issue's target of 1.15",
    "5 as in the issue",
    "mp_spdz = \"/root/.local/share/ltm-harness/mp-spdz\"",
    "the file /home/alice/data.npy",
    "python -m benchmarks.hosts --json /tmp/hosts.json",
    "ltm run --out /tmp/m/s50",
])
def test_the_scanner_catches_a_planted_reference(planted: str) -> None:
    assert problems(f"a line before\n{planted}\nand after"), planted
    assert problems(planted)[0][0] == 1


@pytest.mark.parametrize("fine", [
    "The run issues a warning and exits 1.",
    "Known issues with MP-SPDZ's binaries are listed on its site.",
    "one SSH session per host",
    "mp_spdz = \"/home/ubuntu/.local/share/ltm-harness/mp-spdz\"",
    "stop the parties with Ctrl-C; `ltm hosts stop` stops them on the hosts",
    "a helper thread of boto3 or paramiko",
    "the helper-seed compression of Prio3",
    "scratch in /dev/shm, results with --out results/run",
    "python -m benchmarks.peak_memory --json peak.json -- ltm run --out results/big",
    "Section \"Experimental Evaluation\" of the paper (arXiv:2412.00497)",
    "S3 buckets, session tokens, 10 sessions of 20 minutes",
])
def test_the_scanner_leaves_generic_words_alone(fine: str) -> None:
    assert problems(fine) == []


def test_literals_include_messages_f_strings_and_docstrings() -> None:
    code = ('"""Module doc (issue 20)."""\n'
            'def f(x):\n'
            '    raise ValueError(f"see /work/{x}/out")\n')
    texts = dict(literals(code))
    assert texts[1] == "Module doc (issue 20)." and texts[3] == "see /work/{}/out"
    assert [p for _, t in literals(code) for p in problems(t)]


def test_png_text_chunks_are_read(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().plot([0, 1])
    fig.savefig(tmp_path / "a.png", metadata={"Title": "scale, target 1 GiB (issue 20)",
                                              "Description": "made in /work/repro"})
    text = png_text((tmp_path / "a.png").read_bytes())
    assert "Title: scale, target 1 GiB (issue 20)" in text
    assert {why for _, _, why in problems(text)} == {
        "an internal tracking number", "a path of the machine the project was written on"}


def test_the_files_scanned_are_the_ones_users_read() -> None:
    """Guards against a file list that silently shrinks to nothing."""
    scanned = {p.relative_to(ROOT).as_posix() for p in pages() + sources()}
    for path in ("README.md", "ARCHITECTURE.md", "docs/privacy.md",
                 "docs/concepts/protocols.md", "docs/howto/scale.md", "benchmarks/README.md",
                 "benchmarks/reproduction/security/report.md",
                 "harness/experiments/reproduce.py", "harness/experiments/estimate.py",
                 "harness/experiments/report/scale.py", "infra/aws/session.py",
                 "benchmarks/scale.py", "mpc_programs/fast.mpc.j2",
                 "harness/experiments/specs/scale.toml"):
        assert path in scanned, path
    assert _tracked("*.svg") and _tracked("*.png")


# --- the project's own text ----------------------------------------------------------

def test_pages_name_nothing_outside_the_project() -> None:
    bad = []
    for path in pages():
        bad += _report(str(path.relative_to(ROOT)), problems(path.read_text(encoding="utf-8")))
    assert not bad, "\n".join(bad)


def test_messages_and_docstrings_name_nothing_outside_the_project() -> None:
    bad = []
    for path in sources():
        for line, text in literals(path.read_text(encoding="utf-8")):
            # a literal's own line k is the file's line + k - 1
            bad += _report(str(path.relative_to(ROOT)),
                           [(line + k - 1, hit, why) for k, hit, why in problems(text)])
    assert not bad, "\n".join(bad)


def test_plots_name_nothing_outside_the_project() -> None:
    bad = []
    for path in _tracked("*.svg"):
        bad += _report(str(path.relative_to(ROOT)), problems(svg_text(path)))
    for path in _tracked("*.png"):
        bad += _report(str(path.relative_to(ROOT)), problems(png_text(path.read_bytes())))
    assert not bad, "\n".join(bad)


def test_the_docs_show_the_result_format_version_runs_write() -> None:
    """A page that shows result.json's ``format_version`` shows the one runs write now."""
    from harness.experiments.results import FORMAT_VERSION

    shown = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for hit in re.finditer(r'"format_version": (\d+)|\(format version (\d+);', text):
            shown.append((page.relative_to(ROOT).as_posix(), int(hit.group(1) or hit.group(2))))
    assert shown, "no page shows result.json's format_version"
    assert all(version == FORMAT_VERSION for _, version in shown), (FORMAT_VERSION, shown)


# Words that meant something to the project's own work, not to a user: what the
# summary's stream ratio is, what a comparison is against and what it aims at.
UNDECODED = [
    (re.compile(r"overlap \d+(?:\.\d+)?x"), "an unexplained ratio: say what it sums"),
    (re.compile(r"edaBit prototype|reference prototype"), "a comparison no user can place"),
    (re.compile(r"target: within|target within|(?:meets|misses) the target"),
     "a target the user never set"),
]


def test_the_pages_use_words_a_user_can_decode() -> None:
    pages = [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
             *sorted((ROOT / "docs").rglob("*.md"))]
    bad = [f"{page.relative_to(ROOT)}:{number}: {hit.group(0)!r}: {why}"
           for page in pages
           for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
           for pattern, why in UNDECODED for hit in pattern.finditer(line)]
    assert not bad, "\n".join(bad)
