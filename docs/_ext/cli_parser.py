"""The ``ltm`` parser as the CLI reference shows it (sphinx-argparse reads this).

The parser is the real one, ``harness.cli.build_parser()``; only its help texts are
made safe for reStructuredText, which sphinx-argparse parses them as: ``|A|`` is an
absolute value, not a substitution, `x` is code, and the reader's home directory in a
default is written ``~``, so the page does not depend on the machine that built it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.cli import build_parser

__all__ = ["parser"]

_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _rst(text: str) -> str:
    text = text.replace(str(Path.home()), "~")
    text = text.replace("\\", "\\\\").replace("|", r"\|").replace("*", r"\*")
    return _CODE.sub(r"``\1``", text)


def _walk(parser: argparse.ArgumentParser) -> None:
    parser.description = _rst(parser.description) if parser.description else None
    parser.epilog = _rst(parser.epilog) if parser.epilog else None
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = _rst(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.help:
                    choice.help = _rst(choice.help)
            for sub in dict.fromkeys(action.choices.values()):
                _walk(sub)


def parser() -> argparse.ArgumentParser:
    """``ltm``'s parser, every help text in reStructuredText."""
    built = build_parser()
    _walk(built)
    return built
