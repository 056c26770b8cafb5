"""The mechanisms by name: the one place a run's ``--mechanism`` is looked up.

:func:`register` is the extension point: a new mechanism is a
:class:`~harness.privacy.mechanism.Mechanism` subclass and its registration; the
command line's choices, the config's check and every run then know it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from harness.errors import InputError
from harness.privacy.central import Central
from harness.privacy.dng import Dng
from harness.privacy.ltm import Ltm
from harness.privacy.mechanism import Mechanism, ServerStep

__all__ = ["DEFAULT_MECHANISM", "mechanism_class", "mechanism_names", "noise_words",
           "register", "run_server_step", "unregister"]

_REGISTRY: dict[str, type[Mechanism]] = {cls.name: cls for cls in (Ltm, Dng, Central)}
#: The paper's: the clients add the noise.
DEFAULT_MECHANISM = Ltm.name


def register(cls: type[Mechanism]) -> type[Mechanism]:
    """Make ``cls`` a mechanism that runs choose by its name (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise TypeError(f"{cls!r} is not a Mechanism")
    known = _REGISTRY.get(cls.name)
    if known is not None and known is not cls:
        raise ValueError(f"a mechanism named {cls.name!r} is registered already")
    _REGISTRY[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Forget the mechanism ``name`` (a built-in one stays)."""
    if name not in (Ltm.name, Dng.name, Central.name):
        _REGISTRY.pop(name, None)


def mechanism_names() -> tuple[str, ...]:
    """Every registered mechanism's name, the built-in ones first."""
    return tuple(_REGISTRY)


def mechanism_class(name: str) -> type[Mechanism]:
    """The mechanism registered as ``name``, or one line naming the choices."""
    found = _REGISTRY.get(name)
    if found is None:
        raise InputError(f"unknown --mechanism {name!r}; choose {', '.join(_REGISTRY)}")
    return found


def noise_words(mechanism: str, noise: Mapping[str, object]) -> str:
    """The summary's words for a run's noise (a result written by a mechanism no
    longer registered says its name)."""
    found = _REGISTRY.get(mechanism)
    return mechanism if found is None else found.noise_words(noise)


def run_server_step(step: ServerStep, path: str | os.PathLike[str], *, append: bool,
                    digest_key: bytes) -> tuple[int, int]:
    """One server's ``step``, in this process: its input written into ``path`` (after
    what is there, with ``append``); returns the cells written and their digest."""
    mechanism = mechanism_class(step.mechanism).step_params(step.params)
    return mechanism.run_step(step.shape, path, append=append, digest_key=digest_key)
