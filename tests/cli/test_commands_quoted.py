"""Every ``ltm ...`` command the project quotes is one the real parser accepts.

Quoted where a user copies them from: backquoted in the string literals of
``harness/`` and ``infra/`` (errors, hints, help; docstrings are for developers),
and in ``README.md``, ``ARCHITECTURE.md``, ``benchmarks/README.md`` and the docs
site's pages under ``docs/``
(code blocks and inline code; in a ``console`` block only the ``$ `` lines, the rest
being output).

A quote is often a synopsis, so it is expanded before parsing: ``[optional]``
parts are included, each ``a|b`` alternative is tried (one at a time, the others
at their first), ``...`` is dropped, and placeholders (``DIR``, ``FILE.npy``,
``N``, ``n``, ``<x>``, an f-string's ``{...}``) become a value that the option
they fill accepts. Arguments a quote leaves out ("run `ltm hosts setup`"
names the command, not its inventory) are filled in when argparse says they
are required; any other refusal (an unknown command or option, a bad choice) fails.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from harness.cli import build_parser
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "ARCHITECTURE.md", "docs/")


def doc_files() -> list[Path]:
    # benchmarks/README.md is on the site too: the Results pages include it
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "README.md",
            *sorted((ROOT / "docs").rglob("*.md"))]

_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_']*(\.[a-z]+)?|[a-z]|<[^>]*>|\{\}")
_REQUIRED = re.compile(r"error: (?:(?P<prog>[^:]*): )?the following arguments are "
                       r"required: (?P<names>.*?)(?: \(see .*)?$")
# A required group (``ltm reproduce``'s --out or --estimate): the first one is filled in.
_ONE_OF = re.compile(r"error: one of the arguments (?P<names>\S+) .*is required")


@dataclass(frozen=True)
class Quote:
    where: str  # file:line
    text: str


# --- finding the quotes -----------------------------------------------------------


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    """(offset, content) of each inline code span, backquote runs paired as Markdown does."""
    pos = 0
    while (opening := re.compile(r"`+").search(text, pos)) is not None:
        run = opening.group()
        closing = re.compile(rf"(?<!`){run}(?!`)").search(text, opening.end())
        if closing is None:
            pos = opening.end()
            continue
        yield opening.start(), " ".join(text[opening.end():closing.start()].split())
        pos = closing.end()


def _command(span: str) -> str | None:
    span = span.removeprefix("sudo ")
    return span if re.match(r"ltm\s", span) else None


def quotes_in_python(path: Path) -> list[Quote]:
    return quotes_in_source(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def quotes_in_source(source: str, name: str) -> list[Quote]:
    if not re.search(r"`ltm\s", source):
        return []  # most modules: spares parsing them
    lines = source.splitlines()
    skip: set[int] = set()  # docstrings and the pieces of f-strings (read whole)
    found = []
    for node in ast.walk(ast.parse(source)):  # parents come before their children
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            skip |= {id(child) for child in ast.walk(node) if child is not node}
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}"
                           for v in node.values)
        else:
            continue
        line = node.lineno
        for _, span in code_spans(text):
            command = _command(span)
            if command is None:
                continue
            # the line of the literal piece that holds it, for a string over several lines
            needle = "`" + " ".join(command.split()[:2])
            end = node.end_lineno or node.lineno
            line = next((n for n in range(line, end + 1) if needle in lines[n - 1]), line)
            found.append(Quote(f"{name}:{line}", command))
    return sorted(found, key=lambda q: int(q.where.rpartition(":")[2]))


def quotes_in_markdown(path: Path) -> list[Quote]:
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(ROOT))
    prose = list(lines)  # code blocks blanked, so that inline spans are read in prose only
    found: list[Quote] = []
    fence, current, console = None, None, False
    for n, line in enumerate(lines, 1):
        marker = re.match(r"\s*(```|~~~)(.*)", line)
        if marker and (fence is None or marker.group(1) == fence):
            fence, current = (marker.group(1) if fence is None else None), None
            console = fence is not None and marker.group(2).strip() == "console"
            prose[n - 1] = ""
            continue
        if fence is None:
            continue
        prose[n - 1] = ""
        if console:  # a shell session: commands after "$ ", the rest is their output
            if line.startswith("$ ") and (command := _command(line[2:].strip())):
                found.append(Quote(f"{name}:{n}", command))
            continue
        hash_mark = re.search(r"(?:^|\s)#", line)
        code, comment = (line[:hash_mark.start()], line[hash_mark.end():]) if hash_mark \
            else (line, "")
        found += [Quote(f"{name}:{n}", c) for _, s in code_spans(comment)
                  if (c := _command(s))]
        if current is not None and code.strip() and code[:1].isspace():
            found[current] = Quote(found[current].where, f"{found[current].text} {code.strip()}")
            continue
        current = None
        for part in code.split("&&"):
            command = _command(part.strip().removeprefix("$ "))
            if command:
                current = len(found)
                found.append(Quote(f"{name}:{n}", command))
    text = "\n".join(prose)
    for offset, span in code_spans(text):
        command = _command(span)
        if command:
            found.append(Quote(f"{name}:{text.count(chr(10), 0, offset) + 1}", command))
    return found


def all_quotes() -> list[Quote]:
    found = []
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("infra/**/*.py")]):
        found += quotes_in_python(path)
    for path in doc_files():
        found += quotes_in_markdown(path)
    return found


# --- from a synopsis to command lines ------------------------------------------------


def variants(text: str) -> list[list[str]]:
    """The command lines a synopsis stands for: every alternative tried once."""
    tokens = re.findall(r"\[|\]| \| |[^\s\[\]]+", re.sub(r"\s+\|\s+", " | ", text))
    # a spaced bar outside brackets separates single words, as `up | status` does
    depth = 0
    merged: list[str] = []
    for tok in tokens:
        depth += (tok == "[") - (tok == "]")
        if tok == " | " and depth == 0 and merged:
            merged[-1] += "|"
        elif merged and merged[-1].endswith("|") and tok not in ("[", "]"):
            merged[-1] += tok
        else:
            merged.append(tok)
    seq, _ = _sequence(merged, 0)
    return [[t for t in v if t not in ("...", "…")] for v in _expand(seq)]


def _sequence(tokens: list[str], i: int) -> tuple[list, int]:
    """Items from tokens[i] to the next unmatched "]" or " | ": words, and bracket
    groups as lists of alternatives (each a sequence)."""
    items: list = []
    while i < len(tokens) and tokens[i] not in ("]", " | "):
        if tokens[i] != "[":
            items.append(tokens[i])
            i += 1
            continue
        alternatives = []
        while i < len(tokens) and tokens[i] in ("[", " | "):
            alternative, i = _sequence(tokens, i + 1)
            alternatives.append(alternative)
        items.append(alternatives)
        i += 1  # the closing "]"
    return items, i


def _expand(seq: list) -> list[list[str]]:
    """The first alternative of everything, then each other alternative in turn."""
    choices: list[list[list[str]]] = []
    for item in seq:
        if isinstance(item, str):
            choices.append([[word] for word in item.split("|") if word] or [[]])
        else:
            choices.append([v for alternative in item for v in _expand(alternative)] or [[]])
    base = [c[0] for c in choices]
    out = [sum(base, [])]
    for k, options in enumerate(choices):
        out += [sum([*base[:k], other, *base[k + 1:]], []) for other in options[1:]]
    return out


# --- parsing ---------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def _dummy(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    for value in ("1", "2", "10", "0.5", "x"):
        try:
            if callable(action.type):
                action.type(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError, InputError):
            continue
        return value
    return "1"


def _chain(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that the subcommand words of argv lead to."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def fill_placeholders(parser: argparse.ArgumentParser, argv: list[str]) -> list[list[str]]:
    """argv with each placeholder replaced: one value for an option's, tries for a positional."""
    argv = [p for word in argv for p in (word.split("=", 1) if word.startswith("--") else [word])]
    last = _chain(parser, argv)
    options = {s: a for p in _parsers(parser) for s, a in p._option_string_actions.items()}
    options.update(last._option_string_actions)  # the command's own options win
    # A positional's value is tried as 1, as a value its type accepts (`start N`, N >= 2),
    # and as each of its choices.
    positional = list(dict.fromkeys([
        "1", *(_dummy(a) for a in last._actions if not a.option_strings and not a.choices),
        *(str(c) for a in last._actions if not a.option_strings and a.choices
          for c in a.choices)]))
    slots: list[list[str]] = []
    for k, word in enumerate(argv):
        if not _PLACEHOLDER.fullmatch(word):
            slots.append([word])
        elif k and argv[k - 1] in options:
            slots.append([_dummy(options[argv[k - 1]])])
        else:
            slots.append(positional)
    return [list(v) for v in product(*slots)][:50]


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """None if the parser accepts argv (required arguments filled in), else its complaint."""
    progs = {p.prog: p for p in _parsers(parser)}
    for _ in range(8):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(argv)
        except InputError as exc:  # an option's range (harness.cli.common.number)
            return str(exc)
        except SystemExit as exc:
            if exc.code in (0, None):
                return None  # --help, --version
            message = " ".join(err.getvalue().split())
            required = _REQUIRED.search(message) or _ONE_OF.search(message)
            if not required:
                return message or f"exit {exc.code}"
            prog = required.groupdict().get("prog") or ""
            owner = progs.get(prog, _chain(parser, argv))
            added = _required(owner, required.group("names").split(", "))
            if added is None:
                return message
            argv = [*argv, *added]
            continue
        return None
    return f"still refused after filling in required arguments: {' '.join(argv)}"


def _required(parser: argparse.ArgumentParser, names: list[str]) -> list[str] | None:
    added = []
    for name in names:
        for action in parser._actions:
            choices = "{" + ",".join(map(str, action.choices or ())) + "}"
            if name in ("/".join(action.option_strings), action.metavar, action.dest, choices):
                value = _dummy(action)
                added += [action.option_strings[0], value] if action.option_strings else [value]
                break
        else:
            return None
    return added


def refusal(parser: argparse.ArgumentParser, text: str) -> str | None:
    """None if every command line the quote stands for parses, else the first refusal."""
    for variant in variants(text):
        if variant[:1] != ["ltm"]:
            return "not an ltm command"
        complaints = []
        for argv in fill_placeholders(parser, variant[1:]):
            complaint = parse(parser, argv)
            if complaint is None:
                break
            complaints.append(f"`ltm {' '.join(argv)}`: {complaint}")
        else:
            return complaints[0] if complaints else "nothing to parse"
    return None


# --- the tests ---------------------------------------------------------------------


def test_every_quoted_command_parses() -> None:
    quotes = all_quotes()
    counts = {src: sum(q.where.startswith(src) for q in quotes)
              for src in ("harness/", "infra/", *DOCS)}
    # Guards against a reader that finds nothing, which would pass whatever the quotes say.
    assert counts["harness/"] >= 10 and counts["README.md"] >= 6, counts
    assert counts["ARCHITECTURE.md"] >= 1 and counts["docs/"] >= 50, counts
    parser = build_parser()
    bad = [f"{q.where}: `{q.text}` -> {why}" for q in quotes
           if (why := refusal(parser, q.text)) is not None]
    assert not bad, (f"{len(bad)} of {len(quotes)} quoted commands are refused by "
                     "`ltm`'s parser:\n  " + "\n  ".join(bad))


def test_the_check_refuses_what_ltm_refuses() -> None:
    parser = build_parser()
    for wrong in ("ltm mpspdz doctorr", "ltm run --no-such-option", "ltm run --noise loud",
                  "ltm run --clients many", "ltm hosts trust FILE --nope"):
        assert refusal(parser, wrong) is not None, wrong
    for right in ("ltm hosts setup", "ltm aws down [--cluster NAME | --all]",
                  "ltm run --parties S --clients n [--noise gaussian|laplace|none]",
                  "ltm utility figure lowrank|ridge --out DIR", "ltm analyze"):
        assert refusal(parser, right) is None, (right, refusal(parser, right))
    assert variants("ltm a [--x N | --y] b|c") == [
        ["ltm", "a", "--x", "N", "b"], ["ltm", "a", "--y", "b"], ["ltm", "a", "--x", "N", "c"]]
    source = 'x = f"run `ltm hosts trust {p}` first"\n"""`ltm no`"""\ny = "``ltm a``"\n'
    assert quotes_in_source(source, "m.py") == [Quote("m.py:1", "ltm hosts trust {}"),
                                                Quote("m.py:3", "ltm a")]
