"""Libraries of an optional extra (``pyproject.toml``), imported when first used.

A server or client host installs only the base dependencies, yet runs ``ltm`` (its
``--version``, ``ltm mpspdz install``), whose parser reaches modules that make
tables with pandas. Those modules name the library at the top as usual, through
:func:`lazy_import`: nothing is loaded until an attribute is used, and on a host
without the extra nothing ever is. A command that does use it there fails with
``ModuleNotFoundError`` naming the library, which the CLI turns into one line
saying which extra to install.

The harness's own subpackages load the same way (:func:`lazy_package`): each
``__init__`` names its API in ``if TYPE_CHECKING:`` imports (for readers, mypy and
``tests/test_layers.py``), and a name's module is imported when the name is first
used, so that ``ltm --help`` does not import the whole tree.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["lazy_import", "lazy_package"]


class _Deferred(ModuleType):
    """Stands for a library until something uses it: each use imports it (at once, once
    it is loaded) and reads the attribute there.

    The import is the import system's own, whose per-module locks make threads that
    first use the library together each wait for one whole import (the client hosts'
    upload threads all parse CSV with pandas). Not ``importlib.util.LazyLoader``: on
    the Pythons supported, a second thread's first use may see the module half
    executed (``module 'pandas' has no attribute 'read_csv'``) or hang. A library
    that is not installed raises ``ModuleNotFoundError`` naming it, at its first use.
    """

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__"):  # introspection (copy, pickle, typing) is not use
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self.__name__), attribute)


def lazy_import(name: str) -> ModuleType:
    """The module ``name``, imported on first attribute access, safely from any thread."""
    return sys.modules.get(name) or _Deferred(name)


# {package: {exported name: (module, name there)}}
_ORIGINS: dict[str, dict[str, tuple[str, str]]] = {}


class _LazyPackage(ModuleType):
    """A package whose exports load on first use (see :func:`lazy_package`)."""

    def __getattr__(self, name: str) -> Any:
        origin = _ORIGINS[self.__name__].get(name)
        if origin is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        module, attribute = origin
        # Not cached: the defining module's attribute stays the one truth (a name
        # patched there and restored must not stay patched here).
        found = importlib.import_module(module)
        try:
            return getattr(found, attribute)
        except AttributeError:  # `from .aws import state`: a module not imported yet
            return importlib.import_module(f"{module}.{attribute}")

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing a submodule binds it to its package. Where the package exports
        # something else by that name (experiments.run the function, not the module),
        # the export wins, as it did when the package imported everything at once.
        if (isinstance(value, ModuleType) and name in _ORIGINS[self.__name__]
                and value.__name__ == f"{self.__name__}.{name}"):
            return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(_ORIGINS[self.__name__]))


def lazy_package(name: str) -> None:
    """Make the package ``name`` (its ``__init__`` calls this last) load its exports lazily.

    The exports are the names its ``__init__`` imports inside top-level
    ``if TYPE_CHECKING:`` blocks, read from its source: one list, which mypy and
    the layer checks read as ordinary imports.
    """
    package = sys.modules[name]
    _ORIGINS[name] = _type_checking_imports(Path(package.__file__ or ""), name)
    package.__class__ = _LazyPackage


def _type_checking_imports(init: Path, package: str) -> dict[str, tuple[str, str]]:
    """``{bound name: (module, name there)}`` of the ``from ... import`` under TYPE_CHECKING."""
    origins = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            base = statement.module or ""
            if statement.level:  # relative to this package (infra imports so)
                anchor = package.split(".")[: len(package.split(".")) - statement.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in statement.names:
                origins[alias.asname or alias.name] = (base, alias.name)
    return origins
