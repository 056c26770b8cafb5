"""Result files: the typed run result, its versioned JSON, migrations, safe output dirs.

:class:`RunResult` is what ``ltm run`` measured and writes as ``result.json``;
a sweep writes one ``raw.jsonl`` row per party per repetition (:mod:`.reproduce`).
``FORMAT_VERSION`` goes up with every change of either schema, and this module alone reads older
files: :func:`load_result` and :func:`migrate_row` bring a record up one version
at a time (``_update_to_<N>``), as asv's ``Results`` does with ``api_version``.
A record from a newer harness is refused rather than half understood.

Versions: 1, the first format, gained keys while its number stayed 1 (the
protocol and security, sharing, hosts and network parameters; T_end_to_end,
whether the upload was measured and whether inputs were reused); 2 has every
key of :class:`RunResult` in every file; 3 adds ``privacy``, the (epsilon, delta)
requested and the one the accountant certifies for the noise drawn (null in
older files, which certified nothing; sweep rows are unchanged); 4 draws the noise
on the 2^-F lattice and certifies it as released: ``privacy.on_lattice`` and
``noise_observed.released`` are true (false in older files, whose certificate
and statistics were of the noise before rounding; sweep rows are unchanged); 5 adds the
``mechanism`` parameter (``ltm``, ``dng`` or ``central``: every older run was the
LTM's), ``verification.noise_check`` (the servers' noise against the certified
one; null for the LTM, whose runs are bit-exact) and, in ``privacy``, the
mechanism with its noise's standard deviation against the central Gaussian's
(absent from older files); 6 adds ``noise_observed.sampler``, how the client workers
drew the noise (``compiled, four draws at a time``, ``compiled, one draw at a time``,
``numpy`` or ``none``; several joined by " and " where client hosts differ; null in
older files, which did not record it; sweep rows are unchanged); 7 keeps what is
computed from the plaintext sketch or the secret noise out of ``result.json``
(:data:`PRIVATE_DIAGNOSTICS`: the noise check's mean, variance, their z-scores and
its goodness-of-fit p-value, and the clients' noise's observed mean and variance):
with ``output.npy`` the noise check's mean gave the plaintext sketch's exact sum.
:meth:`RunResult.save` writes them to ``diagnostics.json`` beside it, 0600; a
version-6 file reads as it is (its figures were already public). 7 also gives central
noise its public scale: ``privacy.grid_scale`` c, ``grid_step`` (2^-grid_bits / c, the
unit of the revealed sketch) and ``rounding_error_bound`` (version-6 central runs had
c = 1 and no bound recorded), and adds the ``validate`` parameter (``none``,
``linf`` or ``l2``: older runs checked no client's row), the ``poisoned``
parameter (the clients that sent out-of-range rows, ``[]`` in older files) and
``validation`` (null without a check: the bound, its lattice steps and z, and the
rows the MPC rejected; sweep rows are unchanged).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import platform
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness._version import __version__
from harness.engine import DEFAULT_PROTOCOL, PROTOCOLS
from harness.errors import InputError
from harness.fileio import PRIVATE_FILE_MODE, write_atomic
from harness.optional import lazy_import
from harness.privacy import DEFAULT_MECHANISM

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # the [analysis] extra: not on every host

__all__ = ["DIAGNOSTICS", "FORMAT_VERSION", "PRIVATE_DIAGNOSTICS", "PartyResult",
           "RunParameters", "RunResult", "Verification", "VERIFICATION_METHOD", "load_result",
           "machine_info", "metadata", "migrate_row", "migrate_rows", "migrate_sweep_settings",
           "output_directory", "write_json_atomic"]

FORMAT_VERSION = 7

# Figures computed from the plaintext sketch or from the secret noise, by where they
# sit in the record: beside output.npy they would give away what the noise hides.
PRIVATE_DIAGNOSTICS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("verification", "noise_check"): ("mean", "mean_z", "variance", "variance_z",
                                      "gof_p_value"),
    ("noise_observed",): ("noise_mean", "noise_var"),
}
# The file that holds them, beside result.json, readable by its owner alone.
DIAGNOSTICS = "diagnostics.json"

VERIFICATION_METHOD = ("revealed ring elements equal sum_i S_i enc(A + G_i) mod 2^64, "
                       "computed with numpy from the same encoding")


@dataclass
class Verification:
    ok: bool
    mismatches: int
    entries: int
    method: str = VERIFICATION_METHOD
    # The servers' noise (dng, central): the release against the noise certified.
    noise_check: dict | None = None


@dataclass
class PartyResult:
    """One server's figures; the optional ones only where they were measured."""

    party: int
    time_s: float  # the local program: mpc_time_s + aggregate_s
    data_sent_mb: float
    rounds: int
    global_data_sent_mb: float
    wall_s: float | None = None
    upload_s: float | None = None
    upload_bytes_sent: int | None = None
    expand_s: float | None = None
    mpc_time_s: float | None = None
    aggregate_s: float | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class RunParameters:
    """What was run: the command's settings as the run resolved them."""

    protocol: str
    security: str | None  # semi-honest or malicious (the protocol's)
    tamper: int | None
    sharing: str
    parties: int
    clients: int
    dim: int
    rows: int
    sparsity: int
    dense: bool
    program: str
    input: str
    frac_bits: int
    seed: int | None
    data: str  # the data file, or "synthetic"
    hosts: str  # the inventory, or "local"
    network: str  # the emulated network's profile, or "loopback"
    noise: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)
    mechanism: str = DEFAULT_MECHANISM  # who added the noise: clients, each server or the MPC
    validate: str = "none"  # each client's row checked inside the MPC: none, linf or l2
    poisoned: list[int] = field(default_factory=list)  # --poison's lying clients


@dataclass
class RunResult:
    """``result.json``: one verified run's parameters, measurements and provenance.

    Fields that a migrated older file did not record are None (``t_end_to_end_s``,
    ``upload_measured``, ``model_client_upload_mb``, ``privacy``). ``privacy`` holds
    requested_epsilon, requested_delta, certified_epsilon (None: nothing certified),
    certified_delta, accountant, calibration and generator. Read access by key
    (``result["t_mpc_s"]``) gives the JSON form's values, as the file holds them.
    """

    metadata: dict
    parameters: RunParameters
    parties: list[PartyResult]
    t_mpc_s: float
    t_end_to_end_s: float | None
    upload_measured: bool | None
    inputs_reused: bool
    global_data_sent_mb: float
    client_upload_bytes: list[int]
    c_mpc_mb: float
    model_c_mpc_mb: float
    model_client_upload_mb: float | None
    verification: Verification
    noise_observed: dict
    privacy: dict | None
    timings: dict[str, float]
    # --validate: the bound (InputBound.record) and the rows the MPC rejected; else None.
    validation: dict | None = None
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict:
        """The file's content: today's keys, the format version first."""
        out: dict[str, Any] = {"format_version": self.format_version}
        for f in dataclasses.fields(self):
            if f.name == "format_version":
                continue
            value = getattr(self, f.name)
            if f.name == "parties":
                value = [p.to_json() for p in value]
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = dataclasses.asdict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict) -> RunResult:
        """A current-version record (see :func:`load_result` for older ones)."""
        fields = {k: v for k, v in data.items() if k != "format_version"}
        fields["parameters"] = RunParameters(**fields["parameters"])
        fields["parties"] = [PartyResult(**p) for p in fields["parties"]]
        fields["verification"] = Verification(**fields["verification"])
        return cls(**fields, format_version=FORMAT_VERSION)

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def split(self) -> tuple[dict, dict]:
        """(what may be published, the :data:`PRIVATE_DIAGNOSTICS` taken out of it)."""
        public = self.to_json()
        private: dict[str, Any] = {}
        for where, keys in PRIVATE_DIAGNOSTICS.items():
            parent: Any = public
            for step in where[:-1]:
                parent = parent.get(step) if isinstance(parent, dict) else None
            section = parent.get(where[-1]) if isinstance(parent, dict) else None
            if not isinstance(section, dict):
                continue
            taken = {k: section[k] for k in keys if k in section}
            if taken:
                parent[where[-1]] = {k: v for k, v in section.items() if k not in taken}
                private[".".join(where)] = taken
        return public, private

    def save(self, path: Path) -> None:
        """``path`` (result.json) with what may be published, and ``diagnostics.json``
        beside it, 0600, with the figures computed from the plaintext or the noise."""
        public, private = self.split()
        if private:
            text = json.dumps({"format_version": self.format_version, **private}, indent=2,
                              default=_json_default)
            write_atomic(path.with_name(DIAGNOSTICS), text + "\n", mode=PRIVATE_FILE_MODE)
        write_json_atomic(path, public)


def _update_to_2(data: dict) -> dict:
    """Version 1 gained keys while its number stayed 1: a file without one ran what is
    now its default (semi2k, full sharing, local parties, loopback) and measured
    nothing of it."""
    params = dict(data["parameters"])
    protocol = params.setdefault("protocol", (data.get("metadata") or {}).get("protocol")
                                 or DEFAULT_PROTOCOL)
    known = PROTOCOLS.get(protocol)
    params.setdefault("security", known.model if known else None)
    before: dict[str, object] = {"tamper": None, "sharing": "full", "hosts": "local",
                                 "network": "loopback"}
    unmeasured: dict[str, object] = {"t_end_to_end_s": None, "upload_measured": None,
                                     "inputs_reused": False, "model_client_upload_mb": None}
    return {**unmeasured, **data, "parameters": {**before, **params}}


def _update_to_3(data: dict) -> dict:
    """Version 2 certified nothing: its privacy is unknown (null)."""
    return {**data, "privacy": None}


def _update_to_4(data: dict) -> dict:
    """Version 3 certified and observed the noise before it was rounded to the lattice."""
    privacy = data["privacy"]
    return {**data, "noise_observed": {**data["noise_observed"], "released": False},
            "privacy": None if privacy is None else {**privacy, "on_lattice": False}}


def _update_to_5(data: dict) -> dict:
    """Version 4 ran the LTM only: the clients' noise, verified bit for bit."""
    privacy = data["privacy"]
    if privacy is not None:
        privacy = {"mechanism": "ltm", **privacy}
    return {**data, "parameters": {**data["parameters"], "mechanism": "ltm"},
            "verification": {**data["verification"], "noise_check": None},
            "privacy": privacy}


def _update_to_6(data: dict) -> dict:
    """Version 5 did not record how the clients drew their noise."""
    return {**data, "noise_observed": {**data["noise_observed"], "sampler": None}}


def _update_to_7(data: dict) -> dict:
    """Version 6 kept the plaintext's diagnostics in result.json (read as they are),
    its central noise had no public scale (its grid was 2^-grid_bits), and it checked
    no client's row, nor did any client lie on purpose."""
    data = {**data, "parameters": {**data["parameters"], "validate": "none", "poisoned": []},
            "validation": None}
    privacy = data.get("privacy")
    if not privacy or privacy.get("mechanism") != "central":
        return data
    return {**data, "privacy": {**privacy, "grid_scale": 1,
                                "grid_step": 2.0**-privacy["grid_bits"],
                                "rounding_error_bound": None}}


_RESULT_UPDATES: dict[int, Callable[[dict], dict]] = {1: _update_to_2, 2: _update_to_3,
                                                      3: _update_to_4, 4: _update_to_5,
                                                      5: _update_to_6, 6: _update_to_7}


def _version_of(data: dict, where: str, what: str) -> int:
    version = data.get("format_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(f"{where}: format_version {version!r} is not a version; the "
                         f"{what} is damaged: restore it or rerun")
    if version > FORMAT_VERSION:
        raise InputError(f"{where}: format version {version} is newer than this harness "
                         f"reads ({FORMAT_VERSION}); upgrade ltm-harness to read it")
    return version


def load_result(source: str | os.PathLike[str] | dict) -> RunResult:
    """A ``result.json`` of any version this harness wrote, brought up to the current one.

    ``source`` is the file or its parsed content. A damaged file or one from a newer
    harness is refused in one line.
    """
    where = "result" if isinstance(source, dict) else str(source)
    if isinstance(source, dict):
        data = source
    else:
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{where} does not exist; pass the result.json of an "
                             "`ltm run`") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"cannot read {where}: {exc}; restore it or rerun `ltm run`") \
                from None
    if not isinstance(data, dict):
        raise InputError(f"{where} is not a result (JSON {type(data).__name__}, not an "
                         "object); pass the result.json of an `ltm run`")
    version = _version_of(data, where, "result")
    try:
        while version < FORMAT_VERSION:
            data = _RESULT_UPDATES[version](data)
            version += 1
        return RunResult.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{where} is not a complete version-{version} result ({exc!r} "
                         "does not fit); restore it or rerun `ltm run`") from None


# --- sweep rows (raw.jsonl) and settings (sweep.json) ------------------------------------

# Columns that rows gained while the version stayed 1, with what a row without one
# means: full sharing, nothing measured.
_ROW_ADDED_IN_1 = {"sharing": "full", "t_end_to_end_s": math.nan, "expand_s": math.nan,
                   "upload_measured": math.nan}


# Optional columns, written only by sweeps that measure them (a spec's whole_runs: the
# run's wall and the process tree's peak PSS; the mechanisms sweep's noise and utility),
# with what a row without one means: not measured. Added without a version: a row of any
# version may lack them.
_ROW_OPTIONAL = {"run_wall_s": math.nan, "peak_pss_bytes": math.nan,
                 # the noise's price (rows before it: the LTM, its price not recorded), and
                 # the analyst's errors on the revealed sketch (the mechanisms sweep)
                 "mechanism": DEFAULT_MECHANISM, "requested_epsilon": math.nan,
                 "noise_std": math.nan, "central_std": math.nan, "std_ratio": math.nan,
                 "coins_per_cell": math.nan, "grid_bits": math.nan, "grid_step": math.nan,
                 "psi": math.nan,
                 "phi": math.nan,
                 # --validate: the check and the rows the MPC rejected (rows before it:
                 # no check)
                 "validate": "none", "rejected_rows": math.nan, "poison": 0}


def _row_to_2(row: dict) -> dict:
    return {**_ROW_ADDED_IN_1, **row}


def _row_to_3(row: dict) -> dict:
    return row  # version 3 changed result.json only


def _row_to_4(row: dict) -> dict:
    return row  # so did version 4


def _row_to_5(row: dict) -> dict:
    return row  # and so did version 5


def _row_to_6(row: dict) -> dict:
    return row  # and version 6


def _row_to_7(row: dict) -> dict:
    return row  # and version 7


_ROW_UPDATES: dict[int, Callable[[dict], dict]] = {1: _row_to_2, 2: _row_to_3, 3: _row_to_4,
                                                   4: _row_to_5, 5: _row_to_6, 6: _row_to_7}


def migrate_row(row: dict, where: str = "raw row") -> dict:
    """One ``raw.jsonl`` row of any version, as the current version writes it."""
    version = _version_of(row, where, "raw row")
    while version < FORMAT_VERSION:
        row = _ROW_UPDATES[version](row)
        version += 1
    return {**_ROW_OPTIONAL, **row, "format_version": FORMAT_VERSION}


def migrate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in a table, whatever wrote them: the columns older rows lack, filled as
    :func:`migrate_row` fills them (a resumed sweep mixes old rows and new)."""
    rows = rows.assign(**{c: rows[c] if c in rows.columns else v
                          for c, v in {**_ROW_ADDED_IN_1, **_ROW_OPTIONAL}.items()})
    rows["sharing"] = rows["sharing"].fillna(_ROW_ADDED_IN_1["sharing"])
    return rows


# sweep.json settings written before a setting existed ran what is now its default
# (the committed benchmarks/reproduction/*/sweep.json): read a missing key as that,
# so that those sweeps still resume.
_SETTINGS_BEFORE = {"protocol": DEFAULT_PROTOCOL, "sharing": "full", "calibration": "corollary",
                    "validate": "none"}


def migrate_sweep_settings(record: dict, where: str = "sweep.json") -> dict:
    """A ``sweep.json`` record's settings with the keys older sweeps lack, as they ran."""
    _version_of(record, where, "sweep record")
    return {**_SETTINGS_BEFORE, **record["settings"]}


def machine_info() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh
                        if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"host": socket.gethostname(), "platform": _platform(),
            "python": platform.python_version(), "cpu": cpu or platform.processor(),
            "cpu_count": os.cpu_count()}


def _platform() -> str:
    """``platform.platform()``'s string, without its cost on Linux."""
    uname = os.uname()
    libc, version = platform.libc_ver()
    if uname.sysname != "Linux" or not libc:
        return platform.platform()
    # platform.platform() asks `uname -p` in a subprocess (about 15 ms of every run) for
    # the processor, which it then leaves out where it is the machine or unknown.
    return "-".join(part.replace(" ", "_") for part in
                    (uname.sysname, uname.release, uname.machine, "with", libc + version))


def metadata(*, mp_spdz: dict | None, protocol: str, parties: int) -> dict:
    return {
        "harness_version": __version__,
        "mp_spdz_version": (mp_spdz or {}).get("version"),
        "mp_spdz": mp_spdz,
        "protocol": protocol,
        "parties": parties,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **machine_info(),
    }


def write_json_atomic(path: Path, obj: object) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default)
    write_atomic(path, text + "\n")


def _json_default(obj: object) -> object:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


@contextmanager
def output_directory(out: Path, *, force: bool = False,
                     swept: Callable[[Path], object] | None = None) -> Iterator[Path]:
    """Yield a staging directory that becomes ``out`` only if the block succeeds.

    An existing non-empty ``out`` is refused unless ``force``; then it is
    replaced only once the new results are complete. Called holding ``out``'s lock
    (:func:`harness.fileio.output_lock`), it first removes the staging directories
    of ``out`` that runs killed outright (SIGKILL) left behind, shares included,
    calling ``swept`` with each (:func:`sweep_staging`).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out} already holds results; choose another directory "
                         "or pass --force to replace them")
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in sweep_staging(out):
        if swept is not None:
            swept(path)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=_staging_prefix(out)))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out)


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def sweep_staging(out: Path) -> list[Path]:
    """Remove the staging directories of ``out`` (``.NAME.partial-XXXXXXXX`` beside it)
    that earlier runs left; what was removed.

    A run killed outright (SIGKILL) leaves its staging directory, with its work files
    and the parties' share files in it. Only the holder of ``out``'s lock may call
    this: every run into ``out`` holds that lock to its end, so a staging directory
    found then is a dead run's. Another user's are left (they are not ours to remove).
    """
    prefix = _staging_prefix(out)
    removed: list[Path] = []
    try:
        entries = [p for p in out.parent.iterdir() if p.name.startswith(prefix)
                   and len(p.name) == len(prefix) + 8]  # mkdtemp's 8 characters
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.is_symlink() or not entry.is_dir() or \
                    entry.lstat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed
