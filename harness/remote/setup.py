"""``ltm hosts setup``: make every inventory host ready to run parties.

Each host gets, in its login user's home:

* the harness that runs on this machine, as a wheel built from it (so nothing
  needs to be published anywhere), installed into a virtualenv;
* MP-SPDZ, either this machine's own installation uploaded file by file
  (``local``: the compiler, the party binaries the harness uses and the
  MP-SPDZ libraries they link) or the official release the host downloads
  itself (``release``).

A host is ready only once its record (:data:`RECORD`) is written, which
happens last and atomically; the record is removed before anything on the
host is changed, so a setup that fails half-way never leaves a host that
looks ready. Files whose checksum already matches are not uploaded again, and
a host whose record matches what would be installed is left alone, so a
second run changes nothing. Every host is set up in parallel and every
host's failure is collected into one :class:`HostGroupError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from harness._version import __version__
from harness.engine import (
    OPTIONAL_BINARIES,
    REQUIRED_BINARIES,
    Command,
    MpSpdz,
    check_call,
    find_mpspdz,
)
from harness.errors import InputError, LtmError, MpSpdzError, PartyError
from harness.remote._connect import ConnectOptions, connect, describe
from harness.remote._trust import SETUP_RECORD
from harness.remote.hosts import REMOTE_VENV, Host, Inventory, check_distinct, load_inventory
from harness.remote.ssh import HostGroupError, HostResult

__all__ = [
    "HARNESS_HOME",
    "RECORD",
    "VENV",
    "HarnessBuild",
    "HostSetup",
    "LocalMpSpdz",
    "build_harness",
    "debian_package",
    "harness_digest",
    "local_mpspdz",
    "setup_hosts",
    "wait_for_marker",
]

MODES = ("local", "release")
HARNESS_HOME = "~/.local/share/ltm-harness"
VENV = REMOTE_VENV
RECORD = SETUP_RECORD
_WHEELS = f"{HARNESS_HOME}/wheels"
# A fresh venv with the harness's dependencies takes ~300 MB; the rest is uploads.
_VENV_BYTES = 600 * 2**20
_INSTALL_TIMEOUT = 1800.0  # pip on a slow host, or the release download
_BUILD_TIMEOUT = 300.0
_CHECK_TIMEOUT = 60.0
# Fixed zip timestamps make the wheel a function of the source: the same tree
# gives the same sha256 on every build.
_SOURCE_DATE_EPOCH = "315532800"
_PACKAGES = ("harness", "infra", "mpc_programs", "benchmarks")
_TOP_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt", "setup.cfg")
# Instruction-set extensions a -march=native build may use: one the host lacks
# means an illegal instruction somewhere in the middle of a run.
_ISA_FLAGS = ("sse4_1", "sse4_2", "ssse3", "aes", "pclmulqdq", "avx", "avx2", "bmi1", "bmi2",
              "adx", "fma", "f16c", "movbe", "sha_ni", "gfni", "vaes", "vpclmulqdq",
              "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512ifma")
# A binary started without arguments prints its usage and exits with 1; a
# missing library gives 127, an instruction the CPU lacks SIGILL (128 + 4).
_USAGE_STATUS = 1
_SIGILL_STATUS = 132


# --- what this machine has -------------------------------------------------------------

def _source_root() -> Path | None:
    """The source tree this harness runs from, if it runs from one (editable or checkout)."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "ltm-harness"' in pyproject.read_text(errors="replace"):
        return root
    return None


def _harness_files() -> list[tuple[str, Path]]:
    """(relative path, file) of everything that goes into the wheel, sorted."""
    root = _source_root()
    if root is not None:
        files = [(name, root / name) for name in _TOP_FILES if (root / name).is_file()]
        for package in _PACKAGES:
            for path in (root / package).rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    files.append((path.relative_to(root).as_posix(), path))
        return sorted(files)
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("ltm-harness")
    except importlib.metadata.PackageNotFoundError:
        raise LtmError("cannot find this harness's source tree or installed files to build a "
                       "wheel from; install it with pip (or run from a checkout)") from None
    files = []
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry)))
        name = entry.as_posix()
        if (name.split("/")[0] in _PACKAGES and path.is_file()
                and "__pycache__" not in entry.parts):
            files.append((name, path))
    return sorted(files)


def harness_digest(files: list[tuple[str, Path]] | None = None) -> str:
    """sha256 over the harness's files: equal digests, equal harness."""
    h = hashlib.sha256(f"ltm-harness {__version__}\n".encode())
    for name, path in files if files is not None else _harness_files():
        data = path.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class HarnessBuild:
    version: str
    digest: str  # of the source files (cheap; what hosts are compared by)
    wheel: Path | None = None  # built lazily, only when some host needs it
    sha256: str | None = None


def build_harness(out_dir: Path) -> HarnessBuild:
    """A wheel of the running harness in ``out_dir`` (reproducible: same files, same bytes)."""
    files = _harness_files()
    digest = harness_digest(files)
    root = _source_root()
    tree = out_dir / "src"
    if root is not None:
        for name, path in files:
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tree / name)
    else:
        _write_installed_tree(tree, files)
    dist = out_dir / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    # pip builds in an isolated environment with the build backend pyproject.toml
    # asks for, whatever setuptools this Python has.
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q",
            "--disable-pip-version-check", "-w", str(dist), str(tree)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        check_call(Command("build-wheel", argv, out_dir, env=env, log_dir=out_dir / "logs"),
                   _BUILD_TIMEOUT)
    except PartyError as exc:
        raise LtmError(f"could not build a wheel of the harness with pip (its build backend, "
                       f"setuptools, comes from the package index): {exc}") from None
    wheels = sorted(dist.glob("ltm_harness-*.whl"))
    if len(wheels) != 1:
        raise LtmError(f"building the harness's wheel left {len(wheels)} wheels in {dist}")
    wheel = wheels[0]
    return HarnessBuild(__version__, digest, wheel, _sha256(wheel))


def _write_installed_tree(tree: Path, files: list[tuple[str, Path]]) -> None:
    """A buildable tree from an installed (non-editable) harness."""
    for name, path in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, tree / name)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "ltm-harness"\n'
        f'version = "{__version__}"\nrequires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(_installed_requirements())}\n"
        '[project.scripts]\nltm = "harness.cli:main"\n'
        '[tool.setuptools.packages.find]\ninclude = ["harness*", "mpc_programs*", "infra*", '
        '"benchmarks*"]\n[tool.setuptools.package-data]\nmpc_programs = ["*.mpc.j2"]\n'
        'benchmarks = ["*.toml", "*.csv"]\n')


def _installed_requirements() -> list[str]:
    import importlib.metadata

    return [r for r in importlib.metadata.requires("ltm-harness") or [] if "extra ==" not in r]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class LocalMpSpdz:
    """The files of this machine's MP-SPDZ that a host needs, with their checksums."""

    root: Path
    files: dict[str, str]  # relative path -> sha256
    binaries: tuple[str, ...]
    version: str | None

    @property
    def size(self) -> int:
        return sum((self.root / name).stat().st_size for name in self.files)


def local_mpspdz(mp: MpSpdz | None = None) -> LocalMpSpdz:
    """compile.py, Compiler/, the party binaries and the MP-SPDZ libraries they link."""
    mp = mp or find_mpspdz(None)
    root = mp.root.resolve()
    for name in REQUIRED_BINARIES:
        if not os.access(root / name, os.X_OK):
            raise MpSpdzError(f"--mp-spdz local: the local MP-SPDZ at {root} lacks {name}, "
                              "which the hosts need; build it there (make "
                              f"{name}) or use --mp-spdz release")
    if not (root / "compile.py").is_file() or not (root / "Compiler").is_dir():
        raise MpSpdzError(f"--mp-spdz local: {root} lacks compile.py or Compiler/; point "
                          "--mp-spdz/MP_SPDZ_HOME at a complete MP-SPDZ")
    binaries = tuple(n for n in REQUIRED_BINARIES + OPTIONAL_BINARIES
                     if os.access(root / n, os.X_OK))
    names = {"compile.py", *binaries}
    if (root / "CHANGELOG.md").is_file():
        names.add("CHANGELOG.md")  # where `ltm hosts check` reads the version
    for path in (root / "Compiler").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            names.add(path.relative_to(root).as_posix())
    for binary in binaries:
        for lib in _linked_libraries(root / binary):
            try:
                names.add(lib.resolve().relative_to(root).as_posix())
            except ValueError:
                pass  # a system library: the host has its own (checked there)
    files = {name: _sha256(root / name) for name in sorted(names)}
    return LocalMpSpdz(root, files, binaries, mp.version)


def _linked_libraries(binary: Path) -> list[Path]:
    try:
        done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                              timeout=_CHECK_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []  # no ldd (a static build, or not Linux): nothing of ours to add
    return [Path(m.group(1)) for m in re.finditer(r"=>\s+(/\S+)", done.stdout)]


def debian_package(library: str) -> str:
    """The Debian/Ubuntu package that provides a shared library, by its soname."""
    known = {"libssl.so": "libssl3", "libcrypto.so": "libssl3", "libgmpxx.so": "libgmpxx4ldbl",
             "libgmp.so": "libgmp10", "libsodium.so": "libsodium23", "libntl.so": "libntl44",
             "libstdc++.so": "libstdc++6", "libgcc_s.so": "libgcc-s1", "libz.so": "zlib1g",
             "libbz2.so": "libbz2-1.0", "liblzma.so": "liblzma5", "libzstd.so": "libzstd1"}
    boost = re.fullmatch(r"libboost_(\w+)\.so\.([\d.]+)", library)
    if boost:
        return f"libboost-{boost.group(1).replace('_', '-')}{boost.group(2)}"
    base = re.match(r"(.+?\.so)", library)
    if base and base.group(1) in known:
        package = known[base.group(1)]
        if base.group(1) in ("libssl.so", "libcrypto.so") and library.endswith(".so.1.1"):
            package = "libssl1.1"
        return package
    plain = re.fullmatch(r"lib([\w+-]+?)\.so\.(\d+)", library)
    if plain:  # Debian's rule: soname libfoo.so.N comes in package libfooN
        sep = "-" if plain.group(1)[-1].isdigit() else ""
        return f"lib{plain.group(1).replace('_', '-').lower()}{sep}{plain.group(2)}"
    return f"the package providing {library}"


def _local_cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


# --- one host --------------------------------------------------------------------------

@dataclass
class HostSetup:
    """What setup did on one host (``changes`` empty: it was ready already)."""

    host: Host
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    record: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def line(self) -> str:
        what = "; ".join(self.changes) if self.changes else "unchanged (already set up)"
        return f"{describe(self.host)}: ready in {self.seconds:.1f} s: {what}"


@dataclass
class _Plan:
    mode: str
    build: Callable[[], HarnessBuild]  # builds the wheel on first call (thread-safe)
    digest: str
    mp: LocalMpSpdz | None
    cpu_flags: set[str]


class _Remote:
    """One host's SSH connection and the few shell steps setup needs."""

    def __init__(self, client: paramiko.SSHClient, host: Host) -> None:
        self.client, self.host = client, host
        self.home = ""

    def run(self, script: str, timeout: float = _CHECK_TIMEOUT) -> tuple[int, str, str]:
        _, stdout, stderr = self.client.exec_command(script, timeout=timeout)
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), out, err

    def must(self, script: str, what: str, timeout: float = _CHECK_TIMEOUT) -> str:
        rc, out, err = self.run(script, timeout)
        if rc != 0:
            tail = " | ".join((err or out).strip().splitlines()[-3:])
            raise LtmError(f"{describe(self.host)}: {what} failed (status {rc}): "
                           f"{tail or 'no output'}")
        return out

    def path(self, path: str) -> str:
        """An absolute remote path (SFTP does not expand ``~``)."""
        if path == "~" or path.startswith("~/"):
            return self.home + path[1:]
        return path


def _probe_script(mp_dir: str, names: list[str]) -> str:
    q = shlex.quote
    sums = ""
    if names:
        # Only the files setup would upload: their checksums decide what to skip.
        sums = (f"if cd {_sh(mp_dir)} 2>/dev/null; then "
                f"for f in {' '.join(q(n) for n in names)}; do "
                '[ -f "$f" ] && sha256sum -- "$f" | sed "s/^/sum /"; done; cd; fi; ')
    return ('echo "home $HOME"; echo "arch $(uname -m)"; '
            "echo \"py $(python3 -c 'import sys, venv, ensurepip; "
            "print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null)\"; "
            'mkdir -p "$HOME" && echo "free $(df -Pk "$HOME" | awk \'NR==2 {print $4}\')"; '
            'echo "flags $(grep -m1 ^flags /proc/cpuinfo | cut -d: -f2)"; '
            f'[ -s {_sh(RECORD)} ] && echo "record $(tr -d \'\\n\' < {_sh(RECORD)})"; '
            f'[ -x {_sh(VENV)}/bin/ltm ] && echo "venv ok"; '
            f"{sums}true")


def _sh(path: str) -> str:
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _parse_probe(out: str) -> dict:
    info: dict = {"sums": {}, "record": None}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "sum":
            digest, _, name = value.partition("  ")
            info["sums"][name] = digest
        elif key == "record":
            try:
                info["record"] = json.loads(value)
            except ValueError:
                info["record"] = None
        else:
            info[key] = value.strip()
    return info


def _setup_one(host: Host, known_hosts: Path, inventory_path: Path, plan: _Plan,
               options: ConnectOptions) -> HostSetup:
    """Set up one host; ``plan.mode`` "client" installs the harness only."""
    started = time.perf_counter()
    result = HostSetup(host)
    client = connect(host, known_hosts, options=options, inventory_path=inventory_path)
    try:
        remote = _Remote(client, host)
        names = sorted(plan.mp.files) if plan.mp else []
        info = _parse_probe(remote.must(_probe_script(host.mp_spdz, names), "looking around"))
        remote.home = info.get("home", "")
        _check_host(host, info, plan)
        record = info["record"] or {}
        harness_ok = (info.get("venv") == "ok" and record.get("harness", {}).get("digest")
                      == plan.digest)
        uploads = ([n for n in names if info["sums"].get(n) != plan.mp.files[n]]
                   if plan.mp else [])
        mp_ok = _mp_recorded(record, plan) and not uploads
        if harness_ok and mp_ok:
            result.record = record
            result.seconds = time.perf_counter() - started
            return result
        # From here on the host changes: it must not look ready until the end.
        remote.must(f"rm -f {_sh(RECORD)} && mkdir -p {_sh(_WHEELS)}", "removing the old record")
        harness = record.get("harness") if harness_ok else None
        if plan.mode == "client":
            mp_record: dict = {"source": "none", "binaries": []}
        elif plan.mode == "local":
            # MP-SPDZ before the harness: a host that cannot run the binaries fails in
            # seconds, before the long pip install.
            assert plan.mp is not None
            sent = _upload_mpspdz(remote, plan.mp, uploads)
            _check_binaries(remote, list(plan.mp.binaries))
            if uploads:
                result.changes.append(f"MP-SPDZ: {len(uploads)} file(s) uploaded "
                                      f"({sent / 1e6:.1f} MB), {len(names) - len(uploads)} "
                                      "already there")
            mp_record = {"source": "local", "version": plan.mp.version,
                         "binaries": list(plan.mp.binaries), "files": plan.mp.files}
        if harness is None:
            harness = _install_harness(remote, plan.build())
            result.changes.insert(0, f"harness {harness['version']} installed "
                                     f"(wheel sha256 {harness['wheel_sha256'][:12]})")
        if plan.mode == "release":
            mp_record = _install_release(remote, record)
            _check_binaries(remote, mp_record["binaries"])
            result.changes.append(f"MP-SPDZ {mp_record.get('version') or ''} release "
                                  "installed by the host")
        if not result.changes:
            result.changes.append("setup record rewritten")
        record = {"harness": harness, "mp_spdz": {**mp_record, "path": host.mp_spdz},
                  "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _write_record(remote, record)
        result.record = record
    finally:
        client.close()
    result.seconds = time.perf_counter() - started
    return result


def _mp_recorded(record: dict, plan: _Plan) -> bool:
    mp = record.get("mp_spdz") or {}
    if plan.mode == "client":
        return "source" in mp
    if plan.mode == "release":
        return mp.get("source") == "release"
    assert plan.mp is not None
    return mp.get("source") == "local" and mp.get("files") == plan.mp.files


def _check_host(host: Host, info: dict, plan: _Plan) -> None:
    where = describe(host)
    if info.get("arch") != os.uname().machine and plan.mode == "local":
        raise InputError(f"{where}: the host is {info.get('arch') or 'of unknown architecture'}"
                         f", this machine's MP-SPDZ is built for {os.uname().machine}; use "
                         "--mp-spdz release or a host of the same architecture")
    if not info.get("py"):
        raise InputError(f"{where}: python3 with venv is missing on the host; install it "
                         "there (Debian/Ubuntu: apt-get install python3-venv)")
    if tuple(int(x) for x in info["py"].split(".")) < (3, 10):
        raise InputError(f"{where}: the host's python3 is {info['py']}; the harness needs "
                         "3.10 or newer")
    need = _VENV_BYTES + (plan.mp.size if plan.mp else 0)
    free = int(info.get("free") or 0) * 1024
    if free < need:
        raise InputError(f"{where}: only {free / 2**20:.0f} MiB free in the login user's "
                         f"home, setup needs about {need / 2**20:.0f} MiB; free some space "
                         "or give the instance a larger disk")
    if plan.mode == "local":
        missing = sorted((plan.cpu_flags & set(_ISA_FLAGS)) - set(info.get("flags", "").split()))
        if missing:
            raise InputError(f"{where}: the host's CPU lacks {', '.join(missing)}, which this "
                             "machine's MP-SPDZ may use (built with -march=native); use "
                             "--mp-spdz release, or build MP-SPDZ for the hosts' CPU")


def _install_harness(remote: _Remote, build: HarnessBuild) -> dict:
    assert build.wheel is not None and build.sha256 is not None
    wheel = f"{_WHEELS}/{build.wheel.name}"
    sftp = remote.client.open_sftp()
    try:
        _put_atomic(sftp, build.wheel, remote.path(wheel), 0o644)
    finally:
        sftp.close()
    pip = f"{_sh(VENV)}/bin/pip"
    # The wheel's version does not change with every edit, so pip is told to
    # replace the harness itself; its dependencies are installed once.
    remote.must(
        f"set -e; [ -x {pip} ] || python3 -m venv {_sh(VENV)}; "
        f"{pip} install -q --no-compile --disable-pip-version-check {_sh(wheel)}; "
        f"{pip} install -q --no-compile --disable-pip-version-check --no-deps "
        f"--force-reinstall {_sh(wheel)}; "
        f"mkdir -p \"$HOME/.local/bin\"; ln -sf {_sh(VENV)}/bin/ltm \"$HOME/.local/bin/ltm\"; "
        f"{_sh(VENV)}/bin/ltm --version",
        "installing the harness (python3 -m venv, pip install)", timeout=_INSTALL_TIMEOUT)
    return {"version": build.version, "wheel": build.wheel.name, "wheel_sha256": build.sha256,
            "digest": build.digest}


def _put_atomic(sftp: paramiko.SFTPClient, local: Path, target: str, mode: int) -> None:
    tmp = f"{target}.ltm-upload"
    sftp.put(str(local), tmp)
    sftp.chmod(tmp, mode)
    sftp.posix_rename(tmp, target)


def _upload_mpspdz(remote: _Remote, mp: LocalMpSpdz, names: list[str]) -> int:
    if not names:
        return 0
    base = remote.path(remote.host.mp_spdz.rstrip("/"))
    dirs = sorted({str(Path(n).parent) for n in names} - {"."})
    remote.must(f"mkdir -p {shlex.quote(base)} "
                + " ".join(shlex.quote(f"{base}/{d}") for d in dirs), "creating the MP-SPDZ dir")
    sent = 0
    sftp = remote.client.open_sftp()
    try:
        for name in names:
            local = mp.root / name
            mode = 0o755 if os.access(local, os.X_OK) else 0o644
            _put_atomic(sftp, local, f"{base}/{name}", mode)
            sent += local.stat().st_size
    finally:
        sftp.close()
    return sent


def _install_release(remote: _Remote, record: dict) -> dict:
    mp_dir = remote.host.mp_spdz
    previous = record.get("mp_spdz") or {}
    if previous.get("source") != "release" or previous.get("path") != mp_dir:
        remote.must(f"{_sh(VENV)}/bin/ltm mpspdz install --prefix {_sh(mp_dir)} --force",
                    "`ltm mpspdz install` (the official release)", timeout=_INSTALL_TIMEOUT)
    out = remote.must(f"cd {_sh(mp_dir)} && ls *-party.x; "
                      "head -c 4096 CHANGELOG.md 2>/dev/null | grep -m1 '^## '", "listing MP-SPDZ")
    binaries = [b for b in REQUIRED_BINARIES + OPTIONAL_BINARIES if b in out.split()]
    version = re.search(r"^## (\d+\.\d+\.\d+)", out, re.M)
    return {"source": "release", "version": version.group(1) if version else None,
            "binaries": binaries}


def _check_binaries(remote: _Remote, binaries: list[str]) -> None:
    """Start each binary once on the host; name a missing library's package."""
    where, mp_dir = describe(remote.host), _sh(remote.host.mp_spdz.rstrip("/"))
    script = "".join(
        f'b={shlex.quote(b)}; echo "ldd $b"; LD_LIBRARY_PATH={mp_dir} ldd {mp_dir}/$b '
        f'| grep "not found"; LD_LIBRARY_PATH={mp_dir} {mp_dir}/$b >/dev/null 2>&1 '
        '</dev/null; echo "rc $b $?"; '
        for b in binaries)
    out = remote.must(script, "starting the MP-SPDZ binaries")
    missing: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["ldd"]:
            current = words[1]
        elif "not found" in line:
            missing.setdefault(words[0], []).append(current)
        elif words[:1] == ["rc"]:
            status = int(words[2])
            if status == _SIGILL_STATUS:
                raise InputError(f"{where}: the host's CPU cannot run {words[1]} (illegal "
                                 "instruction): this machine's MP-SPDZ was built for its own "
                                 "CPU; use --mp-spdz release, or build MP-SPDZ for the hosts' "
                                 "CPU (ARCH in its CONFIG.mine)")
            if status != _USAGE_STATUS and not missing:
                raise LtmError(f"{where}: {words[1]} does not start on the host (status "
                               f"{status}); check its MP-SPDZ at {remote.host.mp_spdz}")
    if missing:
        libs = "; ".join(f"{lib} (Debian package {debian_package(lib)}, needed by "
                         f"{', '.join(sorted(set(users)))})" for lib, users in missing.items())
        packages = " ".join(sorted({debian_package(lib) for lib in missing}))
        raise InputError(f"{where}: missing system libraries: {libs}; install them there "
                         f"(apt-get install {packages})")


def _write_record(remote: _Remote, record: dict) -> None:
    target = remote.path(RECORD)
    sftp = remote.client.open_sftp()
    try:
        tmp = f"{target}.tmp"
        with sftp.open(tmp, "w") as fh:
            fh.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        sftp.posix_rename(tmp, target)
    finally:
        sftp.close()


# --- all hosts -------------------------------------------------------------------------

def setup_hosts(inventory_path: str | os.PathLike[str], *, mode: str = "local",
                mp_spdz: str | os.PathLike[str] | None = None,
                echo: Callable[[str], None] = print,
                options: ConnectOptions | None = None) -> list[HostSetup]:
    """Set every host of the inventory up in parallel; one line per host as it finishes."""
    if mode not in MODES:
        raise InputError(f"unknown --mp-spdz {mode!r}; choose local or release")
    inventory_path = Path(inventory_path)
    inventory = load_inventory(inventory_path)
    hosts = _machines(inventory)
    mp = local_mpspdz(find_mpspdz(mp_spdz)) if mode == "local" else None
    if not inventory.known_hosts.is_file():
        # Checked here too so that the message comes once, not once per host.
        connect(hosts[0], inventory.known_hosts, inventory_path=inventory_path)
    build_lock = threading.Lock()
    built: list[HarnessBuild] = []
    scratch = Path(tempfile.mkdtemp(prefix="ltm-setup-"))

    def build() -> HarnessBuild:
        with build_lock:
            if not built:
                built.append(build_harness(scratch))
            return built[0]

    plan = _Plan(mode, build, harness_digest(), mp, _local_cpu_flags())
    results = [HostResult(i, h) for i, h in enumerate(hosts)]
    done: list[HostSetup | None] = [None] * len(hosts)

    client_plan = dataclasses.replace(plan, mode="client", mp=None)

    def one(i: int) -> None:
        try:
            done[i] = _setup_one(hosts[i], inventory.known_hosts, inventory_path,
                                 client_plan if hosts[i] is inventory.client else plan,
                                 options or ConnectOptions())
            echo(done[i].line())
        except Exception as exc:
            results[i].error = exc
            echo(f"{describe(hosts[i])}: FAILED: "
                 f"{str(exc).removeprefix(describe(hosts[i]) + ': ')}")

    try:
        with ThreadPoolExecutor(max_workers=len(hosts), thread_name_prefix="ltm-setup") as pool:
            list(pool.map(one, range(len(hosts))))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [r for r in results if r.error is not None]
    for r in failed:
        if not isinstance(r.error, (LtmError, OSError, EOFError, paramiko.SSHException)):
            raise r.error  # a bug: keep its traceback
    if failed:
        ready = len(hosts) - len(failed)
        raise HostGroupError(
            "; ".join(_labelled(r) for r in failed)
            + f" ({ready} of {len(hosts)} host(s) ready; fix and rerun `ltm hosts setup`, "
              "which skips what is already there)", results)
    finished = [d for d in done if d is not None]
    changed = sum(d.changed for d in finished)
    if changed:
        echo(f"{len(finished)} host(s) ready; {changed} changed.")
    else:
        echo(f"{len(finished)} host(s) ready; nothing changed (all were already set up).")
    return finished


def _labelled(result: HostResult) -> str:
    text = str(result.error) or type(result.error).__name__
    return text if text.startswith(describe(result.host)) else f"{describe(result.host)}: {text}"


def _machines(inventory: Inventory) -> list[Host]:
    """The parties' hosts plus the client host, each machine once."""
    check_distinct(inventory)
    client = inventory.client
    return list(inventory.hosts) + ([client] if client is not None else [])


def wait_for_marker(inventory_path: str | os.PathLike[str], marker: str, *,
                    timeout: float = 600.0, interval: float = 5.0,
                    options: ConnectOptions | None = None) -> None:
    """Wait until ``marker`` exists on every host (e.g. cloud-init's last step)."""
    inventory = load_inventory(inventory_path)
    hosts = _machines(inventory)
    deadline = time.monotonic() + timeout
    results = [HostResult(i, h) for i, h in enumerate(hosts)]

    def one(i: int) -> None:
        try:
            client = connect(hosts[i], inventory.known_hosts, options=options or ConnectOptions(),
                             inventory_path=Path(inventory_path))
            try:
                remote = _Remote(client, hosts[i])
                while remote.run(f"test -f {shlex.quote(marker)}")[0] != 0:
                    if time.monotonic() > deadline:
                        raise LtmError(f"{describe(hosts[i])}: {marker} did not appear within "
                                       f"{timeout:g} s; see /var/log/cloud-init-output.log "
                                       "there")
                    time.sleep(interval)
            finally:
                client.close()
        except Exception as exc:
            results[i].error = exc

    with ThreadPoolExecutor(max_workers=len(hosts), thread_name_prefix="ltm-wait") as pool:
        list(pool.map(one, range(len(hosts))))
    failed = [r for r in results if r.error is not None]
    if failed:
        raise HostGroupError("; ".join(_labelled(r) for r in failed), results)
