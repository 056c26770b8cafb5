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
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["lazy_import", "lazy_package"]


class _Missing(ModuleType):
    """Stands for a library that is not installed, until something uses it."""

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__"):  # introspection (copy, pickle, typing) is not use
            raise AttributeError(attribute)
        raise ModuleNotFoundError(f"No module named {self.__name__!r}", name=self.__name__)


def lazy_import(name: str) -> ModuleType:
    """The module ``name``, loaded on first attribute access (``importlib.util.LazyLoader``)."""
    if sys.modules.get(name) is not None:
        return sys.modules[name]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # blocked (sys.modules[name] = None), or broken
        spec = None
    if spec is None or spec.loader is None:
        return _Missing(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


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
