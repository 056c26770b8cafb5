"""MPC programs: jinja2 templates rendered and compiled once per parameter set.

A compiled program lives in the cache under a key that hashes the rendered
source, the compiler options and the MP-SPDZ installation, so an unchanged
program is never recompiled and a changed one never reuses stale bytecode.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from harness.engine.mpspdz import MpSpdz
from harness.engine.parse import OUTPUT_MARKER, REJECTED_MARKER
from harness.engine.process import Command, check_call
from harness.errors import MpSpdzError, PartyError
from harness.fileio import file_lock, write_atomic

__all__ = ["COMPILE_ARGS", "CompiledProgram", "compile_program", "compile_source",
           "default_cache_dir", "render"]

COMPILE_ARGS = ("-R", "64")
_TEMPLATES = ("fast", "reference", "open", "engine_read", "noise_cost", "validate")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ltm-harness" / "programs"


@dataclass(frozen=True)
class CompiledProgram:
    name: str
    directory: Path  # holds Programs/Bytecode and Programs/Schedules
    key: str
    compile_seconds: float | None  # None: taken from the cache

    @property
    def programs_dir(self) -> Path:
        return self.directory / "Programs"

    @property
    def threads(self) -> int:
        """The threads MP-SPDZ runs it on: its schedule's first line."""
        schedule = self.programs_dir / "Schedules" / f"{self.name}.sch"
        return int(schedule.read_text().split(maxsplit=1)[0])


def _environment() -> Any:
    import jinja2  # loaded only to render: a cached program is found without it

    loader = jinja2.FunctionLoader(
        lambda name: resources.files("mpc_programs").joinpath(name).read_text())
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def render(template: str, **params: object) -> str:
    if template not in _TEMPLATES:
        raise ValueError(f"unknown program template {template!r}")
    return _environment().get_template(f"{template}.mpc.j2").render(
        marker=OUTPUT_MARKER, rejected_marker=REJECTED_MARKER, **params)


def compile_program(mp: MpSpdz, template: str, params: dict, *,
                    cache_dir: Path | None = None, timeout: float = 900,
                    options: tuple[str, ...] = ()) -> CompiledProgram:
    """``template`` rendered with ``params`` and compiled with :data:`COMPILE_ARGS`
    and ``options`` (cached).

    The cache is keyed by the rendered source; a second key, of the templates' text
    and the parameters, names the first in ``index/``, so that a program compiled
    before is found without rendering (nor loading jinja2)."""
    args = (*COMPILE_ARGS, *options)
    installation = {"args": args, "mp_spdz": str(mp.root.resolve()), "version": mp.version,
                    "compiler_mtime": _mtime(mp.compiler)}
    cache = (cache_dir or default_cache_dir())
    cache.mkdir(parents=True, exist_ok=True)
    rendering = {**installation, "params": params, "marker": OUTPUT_MARKER,
                 "templates": _templates_text()}
    index = cache / "index" / f"{template}-{_digest(rendering)}"
    try:
        key = index.read_text().strip()
    except OSError:
        key = ""
    if key and (cache / f"{template}-{key}" / "Programs" / "Schedules"
                / f"{template}.sch").exists():
        return CompiledProgram(template, cache / f"{template}-{key}", key, None)
    source = render(template, **params)
    key = _digest({"source": source, **installation})
    compiled = _compile_cached(mp, template, source, args, cache, key, timeout)
    index.parent.mkdir(exist_ok=True)
    write_atomic(index, key)
    return compiled


def compile_source(mp: MpSpdz, name: str, source: str, *, cache_dir: Path | None = None,
                   timeout: float = 900, options: tuple[str, ...] = ()) -> CompiledProgram:
    """A program of the caller's own (``source``, a plain .mpc text) compiled as
    :func:`compile_program` compiles a template's, into the same cache: for
    benchmarks' and tests' programs beside the harness's."""
    args = (*COMPILE_ARGS, *options)
    key = _digest({"source": source, "args": args, "mp_spdz": str(mp.root.resolve()),
                   "version": mp.version, "compiler_mtime": _mtime(mp.compiler)})
    cache = cache_dir or default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    return _compile_cached(mp, name, source, args, cache, key, timeout)


def _digest(identity: dict) -> str:
    text = json.dumps(identity, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _templates_text() -> str:
    """Every template's text (they include each other): what a rendering depends on."""
    root = resources.files("mpc_programs")
    return "".join(f"{name}\n{root.joinpath(name).read_text()}" for name in
                   sorted(f.name for f in root.iterdir() if f.name.endswith(".j2")))


def _compile_cached(mp: MpSpdz, template: str, source: str, args: tuple[str, ...],
                    cache: Path, key: str, timeout: float) -> CompiledProgram:
    final = cache / f"{template}-{key}"
    # Concurrent runs wait for one compilation instead of racing.
    with file_lock(final):
        if (final / "Programs" / "Schedules" / f"{template}.sch").exists():
            return CompiledProgram(template, final, key, None)
        staging = cache / f".{template}-{key}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            (staging / f"{template}.mpc").write_text(source)
            started = time.perf_counter()
            try:
                check_call(Command(f"compile-{template}",
                                   [sys.executable, str(mp.compiler), *args,
                                    f"{template}.mpc"], staging), timeout)
            except PartyError as exc:
                raise MpSpdzError(
                    f"MP-SPDZ's compiler failed on the {template!r} program "
                    f"({staging / (template + '.mpc')} kept for inspection):\n"
                    f"{exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else exc}"
                ) from exc
            elapsed = time.perf_counter() - started
            schedule = staging / "Programs" / "Schedules" / f"{template}.sch"
            bytecode = staging / "Programs" / "Bytecode"
            if not schedule.is_file() or not any(bytecode.glob(f"{template}-*.bc")):
                raise MpSpdzError(
                    f"MP-SPDZ's compiler ({mp.compiler}) exited successfully but wrote no "
                    f"schedule or bytecode for the {template!r} program; the installation is "
                    "broken: check it with `ltm doctor` or reinstall it")
            # A broken entry from an older harness (no schedule) would block the rename.
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
        except BaseException as exc:
            # A program the compiler rejected is kept for inspection; nothing else is.
            if not isinstance(exc.__cause__, PartyError):
                shutil.rmtree(staging, ignore_errors=True)
            raise
    return CompiledProgram(template, final, key, elapsed)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def link_program(program: CompiledProgram, party_dir: Path,
                 public_file: Path | None = None) -> None:
    """Make a compiled program runnable from ``party_dir`` with its public input
    (``public_file``, hard-linked, when it was written as a stream; else empty)."""
    programs = party_dir / "Programs"
    for sub in ("Bytecode", "Schedules"):
        (programs / sub).mkdir(parents=True, exist_ok=True)
        # Per file, so several programs can share one party directory.
        for compiled in (program.programs_dir / sub).iterdir():
            link = programs / sub / compiled.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(compiled)
    (programs / "Public-Input").mkdir(exist_ok=True)
    target = programs / "Public-Input" / program.name
    if public_file is None:
        target.write_text("")
        return
    target.unlink(missing_ok=True)
    os.link(public_file, target)  # not a symlink: the work directory may be moved after
