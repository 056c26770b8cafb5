"""Sweep specifications: the paper's Tables 3-5 as grids of cells to run, and the
sweeps beside them (``security``; ``scale``, n up to 1e9 in whole runs; ``mechanisms``,
every mechanism at every epsilon, with the analyst's errors), by name only.

Each table is a TOML file in ``harness/experiments/specs/`` (``table3.toml``
...; the schema is documented in each file's header), package data of the
harness. A spec's cells are every variant (server count) times every grid
point (n, s), in file order.

``--scale`` multiplies every n so that a sweep can be tried on a small machine:
the run's n is ``round(n * scale)`` (halves round up) and never below m, because
the sketch needs at least as many clients as it has rows (``harness.clients.sketch``).
Cells keep the paper's n (``paper_clients``) and their key names it, so a cell
is matched with the paper's row at any scale; the raw rows carry the scale, and
a sweep must not mix scales within one output directory.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import InputError
from harness.optional import lazy_import
from harness.privacy import CALIBRATIONS

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "TABLES",
    "X_AXES",
    "Cell",
    "Spec",
    "Variant",
    "expand",
    "load_spec",
    "paper_values",
    "read_spec",
    "resolve_tables",
    "scaled_clients",
    "spec_dir",
]

TABLES = ("table3", "table4", "table5")
# Sweeps beside the paper's tables, run by name only (not part of "all").
EXTRA_SWEEPS = ("security", "scale", "mechanisms", "validation")
X_AXES = ("clients", "sparsity")
PAPER_CSV = "paper_tables.csv"

_TOP_KEYS = ("name", "title", "x", "repeat", "rows", "dim", "paper", "variant", "grid",
             "protocols", "programs", "points", "whole_runs", "mechanisms", "epsilons",
             "utility", "validations", "poisons", "calibration")
_REQUIRED_TOP = ("name", "title", "x", "repeat", "rows", "dim", "variant", "grid")
_VARIANT_KEYS = ("servers", "label", "note")
_GRID_KEYS = ("clients", "sparsity")
_UTILITY_KEYS = ("rank", "lambda")


@dataclass(frozen=True)
class Cell:
    """One parameter setting of a table, run ``repeat`` times."""

    table: str  # "table3"
    variant: str  # "" when the table has a single variant, e.g. "S3" / "S2" for table5
    servers: int
    clients: int  # n after --scale
    paper_clients: int  # n in the paper
    sparsity: int
    rows: int  # m
    dim: int  # d
    protocol: str = ""  # "": the command line's --protocol
    program: str = ""  # "": the command line's --program
    mechanism: str = ""  # "": the LTM (who adds the noise; see harness.clients.MECHANISMS)
    epsilon: float | None = None  # None: the run's default
    validate: str = ""  # "": the command line's --validate (the validation sweep's cells)
    poison: int | None = None  # lying clients (--poison); None: none

    @property
    def key(self) -> str:
        """Stable id for resuming, e.g. ``table5/S2/n=500000/s=10`` (the paper's n)."""
        return "/".join(self._where() + [f"n={self.paper_clients}", f"s={self.sparsity}"])

    @property
    def label(self) -> str:
        """What the progress bar says: the n being run, e.g. ``table5/S2/n=25000/s=10``
        (and the paper's n beside it when ``--scale`` changed it)."""
        scaled = f" (paper n={self.paper_clients})" if self.clients != self.paper_clients else ""
        return "/".join(self._where() + [f"n={self.clients}", f"s={self.sparsity}"]) + scaled

    def _where(self) -> list[str]:
        parts = [self.table] + ([self.variant] if self.variant else [])
        parts += [x for x in (self.protocol, self.program, self.mechanism) if x]
        parts += [f"validate={self.validate}"] if self.validate else []
        parts += [f"K={self.poison}"] if self.poison is not None else []
        return parts + ([f"eps={self.epsilon:g}"] if self.epsilon is not None else [])

    @property
    def left_out_keys(self) -> tuple[str, str]:
        """(what, point) under which a sweep records why this cell was left out, e.g.
        ``("spdz2k local central", "n=100000 s=1 eps=0.1")``."""
        what = " ".join(x for x in (self.protocol, self.program, self.mechanism,
                                    self.validate and f"--validate {self.validate}") if x)
        eps = f" eps={self.epsilon:g}" if self.epsilon is not None else ""
        liars = f" K={self.poison}" if self.poison is not None else ""
        return what, f"n={self.paper_clients} s={self.sparsity}{eps}{liars}"

    @property
    def model_c_mpc_mb(self) -> float:
        """The paper's communication model S * 8 * (s*n*d + m*d) bytes, in MB, at the run's n."""
        return c_mpc_model_mb(self.servers, self.sparsity, self.clients, self.rows, self.dim)


@dataclass(frozen=True)
class Variant:
    servers: int
    label: str
    note: str = ""


@dataclass(frozen=True)
class Spec:
    """A validated sweep specification; ``cells`` are at scale 1."""

    name: str
    title: str
    x: str  # "clients" or "sparsity"
    repeat: int
    cells: tuple[Cell, ...]
    rows: int = 0
    dim: int = 0
    variants: tuple[Variant, ...] = ()
    paper: str = ""  # the paper_tables.csv table to compare with
    path: Path | None = None
    protocols: tuple[str, ...] = ()  # the spec runs every protocol x program itself
    programs: tuple[str, ...] = ()
    # Each repetition a whole run (workload built, inputs prepared anew, the process
    # tree's peak memory sampled), as the scale sweep measures; else the servers rerun.
    whole_runs: bool = False
    # Who adds the noise, and at which epsilons: every cell is run with each (the
    # mechanisms sweep); empty: the LTM at the run's epsilon.
    mechanisms: tuple[str, ...] = ()
    epsilons: tuple[float, ...] = ()
    # The analyst's error measures on each revealed sketch: (rank k of psi, ridge lambda).
    utility: tuple[int, float] | None = None
    # The checks of each client's row (--validate), every one in every cell, and the
    # numbers of lying clients (--poison), those above 0 under the first protocol only
    # (what they do to the release does not depend on the protocol).
    validations: tuple[str, ...] = ()
    poisons: tuple[int, ...] = ()
    # The LTM's Gaussian calibration where ``--calibration`` is not given: the paper's
    # tables keep the paper's corollary; a comparison of mechanisms gives each its tightest.
    calibration: str = "corollary"


def c_mpc_model_mb(servers: int, sparsity: int, clients: int, rows: int, dim: int) -> float:
    # Each server receives one 8-byte share of each of the s*n*d noisy entries and
    # sends its m*d output shares (paper README: this reproduces every C_MPC value).
    return servers * 8 * (sparsity * clients * dim + rows * dim) / 1e6


def spec_dir() -> Path:
    """The directory holding the table specs and the paper's values."""
    # pip installs the harness as plain files (never zipped), so this is a real directory.
    return Path(str(importlib.resources.files("harness.experiments") / "specs"))


def resolve_tables(which: str) -> list[str]:
    """``"all"`` -> every table; one table's name -> that table; else an InputError."""
    if which == "all":
        return list(TABLES)
    if which in TABLES or which in EXTRA_SWEEPS:
        return [which]
    raise InputError(f"unknown table {which!r}; choose one of "
                     f"{', '.join(TABLES + EXTRA_SWEEPS)} or all")


def load_spec(name: str, directory: Path | None = None) -> Spec:
    """The spec ``<name>.toml`` from the harness's specs (or ``directory``)."""
    base = Path(directory) if directory is not None else spec_dir()
    path = base / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in base.glob("*.toml"))
        raise InputError(f"no sweep specification {path}; choose one of "
                         f"{', '.join(known) or '(none found)'}")
    return read_spec(path)


def read_spec(path: Path) -> Spec:
    """Read and validate one spec file; every error names the file, the key and the fix."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise InputError(f"cannot read sweep specification {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML: {exc}; fix the syntax") from exc
    return _parse_spec(path, data)


def _parse_spec(path: Path, data: dict[str, Any]) -> Spec:
    _no_unknown(path, "", data, _TOP_KEYS)
    for key in _REQUIRED_TOP:
        if key not in data:
            raise InputError(f"{path}: missing key {key!r}; add it (see the file's header)")
    name = _string(path, "name", data["name"])
    if name != path.stem:
        raise InputError(f"{path}: key 'name' is {name!r} but the file is {path.name}; "
                         f"set name = {path.stem!r} or rename the file")
    title = _string(path, "title", data["title"])
    x = _string(path, "x", data["x"])
    if x not in X_AXES:
        raise InputError(f"{path}: key 'x' is {x!r}; set it to one of {', '.join(X_AXES)}")
    repeat = _positive_int(path, "repeat", data["repeat"])
    rows = _positive_int(path, "rows", data["rows"])
    dim = _positive_int(path, "dim", data["dim"])
    paper = _string(path, "paper", data.get("paper", name))
    variants = _variants(path, data["variant"])
    clients, sparsity = _grid(path, data["grid"], rows)
    points = [(n, s) for n in clients for s in sparsity]
    points += [p for p in _points(path, data.get("points", []), rows) if p not in points]
    protocols = _names(path, "protocols", data.get("protocols", []))
    programs = _names(path, "programs", data.get("programs", []))
    whole_runs = data.get("whole_runs", False)
    if not isinstance(whole_runs, bool):
        raise InputError(f"{path}: key 'whole_runs' must be true or false, got {whole_runs!r}")
    if bool(protocols) != bool(programs):
        raise InputError(f"{path}: keys 'protocols' and 'programs' go together; give both "
                         "or neither")
    mechanisms = _names(path, "mechanisms", data.get("mechanisms", []))
    epsilons = _epsilons(path, data.get("epsilons", []))
    utility = _utility(path, data["utility"]) if "utility" in data else None
    validations = _names(path, "validations", data.get("validations", []))
    if not set(validations) <= {"none", "linf", "l2"}:
        raise InputError(f"{path}: key 'validations' must name checks of none, linf, l2")
    poisons = data.get("poisons", [])
    if not isinstance(poisons, list) or len(set(poisons)) != len(poisons) or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in poisons):
        raise InputError(f"{path}: key 'poisons' must be a list of distinct counts >= 0")
    calibration = data.get("calibration", "corollary")
    if calibration not in CALIBRATIONS:
        raise InputError(f"{path}: key 'calibration' is {calibration!r}; set it to one of "
                         f"{', '.join(CALIBRATIONS)}")
    # Point by point, every protocol x program in turn: a repetition of each runs
    # close in time to the others', so machine load falls on all of them alike and
    # the ratios between protocols compare like with like.
    # The mechanisms of one protocol run back to back, for the same reason.
    eps_list: list[float | None] = list(epsilons) or [None]
    checks: list[str] = list(validations) or [""]
    liars: list[int | None] = list(poisons) or [None]
    cells = tuple(
        Cell(table=name, variant=v.label, servers=v.servers, clients=n, paper_clients=n,
             sparsity=s, rows=rows, dim=dim, protocol=proto, program=prog, mechanism=mech,
             epsilon=eps, validate=check, poison=k)
        for v in variants for n, s in points for eps in eps_list
        for proto in (protocols or [""]) for prog in (programs or [""])
        for mech in (mechanisms or [""]) for k in liars for check in checks
        if not k or proto == (protocols or [""])[0])
    return Spec(name=name, title=title, x=x, repeat=repeat, cells=cells, rows=rows, dim=dim,
                variants=variants, paper=paper, path=path, protocols=tuple(protocols),
                programs=tuple(programs), whole_runs=whole_runs,
                mechanisms=tuple(mechanisms), epsilons=tuple(epsilons), utility=utility,
                validations=tuple(validations), poisons=tuple(poisons),
                calibration=calibration)


def _epsilons(path: Path, raw: Any) -> list[float]:
    if not isinstance(raw, list) or len(set(raw)) != len(raw) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf
            for v in raw):
        raise InputError(f"{path}: key 'epsilons' must be a list of distinct positive numbers")
    return [float(v) for v in raw]


def _utility(path: Path, raw: Any) -> tuple[int, float]:
    if not isinstance(raw, dict):
        raise InputError(f"{path}: key 'utility' must be a [utility] table with rank and "
                         "lambda")
    _no_unknown(path, "utility.", raw, _UTILITY_KEYS)
    if set(raw) != set(_UTILITY_KEYS):
        raise InputError(f"{path}: key 'utility' needs rank and lambda; add them")
    lam = raw["lambda"]
    if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0 <= lam < math.inf:
        raise InputError(f"{path}: key 'utility.lambda' must be a number >= 0, got {lam!r}")
    return _positive_int(path, "utility.rank", raw["rank"]), float(lam)


def _names(path: Path, key: str, raw: Any) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw) \
            or len(set(raw)) != len(raw):
        raise InputError(f"{path}: key {key!r} must be a list of distinct names")
    return list(raw)


def _points(path: Path, raw: Any, rows: int) -> list[tuple[int, int]]:
    """Extra (n, s) points beside the grid, e.g. one of Table 5's."""
    if not isinstance(raw, list) or not all(isinstance(v, dict) for v in raw):
        raise InputError(f"{path}: key 'points' must be [[points]] tables with clients and "
                         "sparsity")
    out = []
    for i, entry in enumerate(raw):
        _no_unknown(path, f"points[{i}].", entry, _GRID_KEYS)
        if set(entry) != set(_GRID_KEYS):
            raise InputError(f"{path}: key 'points[{i}]' needs clients and sparsity; add them")
        n = _positive_int(path, f"points[{i}].clients", entry["clients"])
        s = _positive_int(path, f"points[{i}].sparsity", entry["sparsity"])
        if n < rows or s > rows:
            raise InputError(f"{path}: key 'points[{i}]' needs rows <= clients and "
                             f"sparsity <= rows, got n={n} s={s}")
        out.append((n, s))
    return out


def _variants(path: Path, raw: Any) -> tuple[Variant, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(v, dict) for v in raw):
        raise InputError(f"{path}: key 'variant' must be one or more [[variant]] tables "
                         "with servers and label; add them")
    out = []
    for i, entry in enumerate(raw):
        where = f"variant[{i}]"
        _no_unknown(path, where + ".", entry, _VARIANT_KEYS)
        for key in ("servers", "label"):
            if key not in entry:
                raise InputError(f"{path}: missing key '{where}.{key}'; add it")
        servers = _positive_int(path, f"{where}.servers", entry["servers"])
        if servers < 2:
            raise InputError(f"{path}: key '{where}.servers' is {servers}; semi2k needs at "
                             "least 2 servers")
        label = _string(path, f"{where}.label", entry["label"])
        if "/" in label or label.strip() != label:
            raise InputError(f"{path}: key '{where}.label' {label!r} is used in cell keys; "
                             "use letters and digits only")
        note = _string(path, f"{where}.note", entry.get("note", ""))
        out.append(Variant(servers=servers, label=label, note=note))
    labels = [v.label for v in out]
    if len(out) > 1 and ("" in labels or len(set(labels)) != len(labels)):
        raise InputError(f"{path}: key 'variant.label': with several variants every label "
                         f"must be distinct and non-empty, got {labels}; name each variant")
    return tuple(out)


def _grid(path: Path, raw: Any, rows: int) -> tuple[list[int], list[int]]:
    if not isinstance(raw, dict):
        raise InputError(f"{path}: key 'grid' must be a [grid] table with clients and "
                         "sparsity lists")
    _no_unknown(path, "grid.", raw, _GRID_KEYS)
    values = {}
    for key in _GRID_KEYS:
        if key not in raw:
            raise InputError(f"{path}: missing key 'grid.{key}'; add a list of integers")
        items = raw[key]
        if not isinstance(items, list) or not items:
            raise InputError(f"{path}: key 'grid.{key}' must be a non-empty list of integers")
        ints = [_positive_int(path, f"grid.{key}", v) for v in items]
        if len(set(ints)) != len(ints):
            raise InputError(f"{path}: key 'grid.{key}' repeats a value: {ints}; drop duplicates")
        values[key] = ints
    for n in values["clients"]:
        if n < rows:
            raise InputError(f"{path}: key 'grid.clients' has n={n} < rows={rows}; the sketch "
                             "needs at least m clients")
    for s in values["sparsity"]:
        if s > rows:
            raise InputError(f"{path}: key 'grid.sparsity' has s={s} > rows={rows}; each "
                             "column's non-zeros sit in distinct rows, so s <= m")
    return values["clients"], values["sparsity"]


def _no_unknown(path: Path, prefix: str, data: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise InputError(f"{path}: unknown key {prefix + unknown[0]!r}; allowed keys are "
                         f"{', '.join(allowed)} (check the spelling)")


def _string(path: Path, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"{path}: key {key!r} must be a string, got {value!r}; quote it")
    return value


def _positive_int(path: Path, key: str, value: Any) -> int:
    # TOML booleans are ints in Python; `repeat = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{path}: key {key!r} must be a positive integer, got {value!r}")
    return value


def scaled_clients(paper_clients: int, scale: float, rows: int) -> int:
    """The run's n for the paper's n: round half up, and at least m (the sketch's minimum)."""
    return max(rows, 1, math.floor(paper_clients * scale + 0.5))


def expand(spec: Spec, scale: float = 1.0) -> list[Cell]:
    """The spec's cells with every n multiplied by ``scale`` (see the module docstring)."""
    if isinstance(scale, bool) or not isinstance(scale, int | float) \
            or not math.isfinite(scale) or scale <= 0:
        raise InputError(f"--scale must be a positive number, got {scale!r}; use 1 for the "
                         "paper's n, or e.g. 0.1 for a tenth of it")
    return [dataclasses.replace(c, clients=scaled_clients(c.paper_clients, scale, c.rows))
            for c in spec.cells]


def paper_values(path: Path | None = None) -> pd.DataFrame:
    """The paper's Tables 3-5 (``specs/paper_tables.csv``), one row per paper cell.

    Columns: table ("table3"), servers (as captioned), servers_by_comm (what C_MPC
    implies), sparsity, clients, rows, dim, t_mpc_mean_s, t_mpc_std_s, c_mpc_mb, note.
    """
    path = Path(path) if path is not None else spec_dir() / PAPER_CSV
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read the paper's values {path}: {exc.strerror}; "
                         "reinstall ltm-harness") from exc
    # Skip whole-line comments only: pandas' comment= would also cut a note at a '#'.
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    # keep_default_na=False: an empty note is "", not NaN.
    return pd.read_csv(io.StringIO(body), dtype={"table": str, "note": str},
                       keep_default_na=False)
