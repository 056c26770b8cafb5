"""Libraries of an optional extra (``pyproject.toml``), imported when first used.

A server or client host installs only the base dependencies, yet runs ``ltm`` (its
``--version``, ``ltm mpspdz install``), whose parser reaches modules that make
tables with pandas. Those modules name the library at the top as usual, through
:func:`lazy_import`: nothing is loaded until an attribute is used, and on a host
without the extra nothing ever is. A command that does use it there fails with
``ModuleNotFoundError`` naming the library, which the CLI turns into one line
saying which extra to install.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["lazy_import"]


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
