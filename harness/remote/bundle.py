"""MP-SPDZ for the hosts: this machine's own build as a bundle of files, and what a host
needs to run it.

``--mp-spdz local`` uploads :func:`local_mpspdz`'s files (the compiler, the
party binaries the harness uses and the MP-SPDZ libraries they link, each
with its checksum, so a file already there is not sent again); ``release``
has the host install the official release itself. Either way every binary is
started once on the host, and a missing system library is named with the
Debian package that provides it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.engine import OPTIONAL_BINARIES, REQUIRED_BINARIES, MpSpdz, find_mpspdz
from harness.errors import InputError, LtmError, MpSpdzError
from harness.remote._shell import RemoteShell, put_atomic, shell_path
from harness.remote.hosts import REMOTE_VENV
from harness.remote.wheel import file_sha256

__all__ = ["LocalMpSpdz", "check_binaries", "debian_package", "install_release",
           "local_cpu_flags", "local_mpspdz", "missing_cpu_flags", "upload_mpspdz"]

_INSTALL_TIMEOUT = 1800.0  # the release download and unpacking on a slow host
_CHECK_TIMEOUT = 60.0
# Instruction-set extensions a -march=native build may use: one the host lacks
# means an illegal instruction somewhere in the middle of a run.
_ISA_FLAGS = ("sse4_1", "sse4_2", "ssse3", "aes", "pclmulqdq", "avx", "avx2", "bmi1", "bmi2",
              "adx", "fma", "f16c", "movbe", "sha_ni", "gfni", "vaes", "vpclmulqdq",
              "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512ifma")
# A binary started without arguments prints its usage and exits with 1; a
# missing library gives 127, an instruction the CPU lacks SIGILL (128 + 4).
_USAGE_STATUS = 1
_SIGILL_STATUS = 132


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
    files = {name: file_sha256(root / name) for name in sorted(names)}
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


def local_cpu_flags() -> set[str]:
    """This machine's CPU flags (what a -march=native MP-SPDZ may use)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def missing_cpu_flags(local: set[str], host: str) -> list[str]:
    """The instruction-set extensions of this machine that the host (its ``flags`` line)
    lacks."""
    return sorted((local & set(_ISA_FLAGS)) - set(host.split()))


def upload_mpspdz(remote: RemoteShell, mp: LocalMpSpdz, names: list[str]) -> int:
    """Upload ``names`` of the bundle into the host's MP-SPDZ directory; bytes sent."""
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
            put_atomic(sftp, local, f"{base}/{name}", mode)
            sent += local.stat().st_size
    finally:
        sftp.close()
    return sent


def install_release(remote: RemoteShell, record: dict) -> dict:
    """Have the host install the official release (unless its setup record says it did);
    the record of what is there."""
    mp_dir = remote.host.mp_spdz
    previous = record.get("mp_spdz") or {}
    if previous.get("source") != "release" or previous.get("path") != mp_dir:
        ltm = shell_path(f"{REMOTE_VENV}/bin/ltm")
        remote.must(f"{ltm} mpspdz install --prefix {shell_path(mp_dir)} --force",
                    "`ltm mpspdz install` (the official release)", timeout=_INSTALL_TIMEOUT)
    out = remote.must(f"cd {shell_path(mp_dir)} && ls *-party.x; "
                      "head -c 4096 CHANGELOG.md 2>/dev/null | grep -m1 '^## '", "listing MP-SPDZ")
    binaries = [b for b in REQUIRED_BINARIES + OPTIONAL_BINARIES if b in out.split()]
    version = re.search(r"^## (\d+\.\d+\.\d+)", out, re.M)
    return {"source": "release", "version": version.group(1) if version else None,
            "binaries": binaries}


def check_binaries(remote: RemoteShell, binaries: list[str]) -> None:
    """Start each binary once on the host; name a missing library's package."""
    where, mp_dir = remote.label, shell_path(remote.host.mp_spdz.rstrip("/"))
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
