"""Sphinx configuration of the ltm-harness documentation.

Built in CI with warnings as errors (``.ci/run``):
``python3 -m sphinx -W --keep-going -b html docs build/docs``. Pages are Markdown
(myst-parser); the CLI reference is generated from the real parser
(sphinx-argparse, ``harness.cli.build_parser``) and the API reference from each
subpackage's ``__all__`` (autodoc), so neither can drift from the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a checkout builds its own tree, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

from harness._version import __version__  # noqa: E402

project = "ltm-harness"
author = "ltm-harness contributors"
copyright = "ltm-harness contributors, MIT licence"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# The Results pages include benchmarks/README.md by sections, whose headings start at ###.
suppress_warnings = ["myst.header"]

# The API pages list each package's exports; their signatures stay readable
# without every annotation expanded.
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# Optional extras (boto3) need not be installed to read the API.
autodoc_mock_imports = ["boto3", "botocore"]

# `--option` stays two hyphens (not an en dash) in prose and in the parser's help.
smartquotes = False
# Blocks without a language (sphinx-argparse's usage lines, docstrings' examples) are plain text.
highlight_language = "text"

html_theme = "furo"
html_title = f"ltm-harness {release}"
html_show_sourcelink = False


# Docstrings are written for readers of the source: `|x|` there is an absolute
# value, not a reStructuredText substitution. Escape bars outside inline literals so
# that they render as written (and a new docstring cannot break the -W build).
_LITERAL = re.compile(r"(``.+?``)")


def _escape_bars(app, what, name, obj, options, lines):
    for k, line in enumerate(lines):
        parts = _LITERAL.split(line)
        lines[k] = "".join(p if i % 2 else p.replace("|", r"\|") for i, p in enumerate(parts))


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars)
