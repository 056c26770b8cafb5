"""Per-run TLS certificates for the parties.

MP-SPDZ authenticates parties by certificates named ``P<i>.pem`` whose common
name is ``P<i>``, found through OpenSSL's hashed directory lookup. Fresh ones
for every run mean no key outlives its run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.errors import LtmError
from harness.fileio import PRIVATE_UMASK, copy_private, private_dir

__all__ = ["make_certificates", "install_certificates"]


def _openssl(*args: str) -> str:
    exe = shutil.which("openssl")
    if exe is None:
        raise LtmError("the openssl command is missing; install it (apt-get install openssl)")
    # The key file is written by openssl itself: private from its creation.
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60,
                          umask=PRIVATE_UMASK)
    if proc.returncode:
        raise LtmError(f"openssl {args[0]} failed: {proc.stderr.strip()}")
    return proc.stdout


def make_certificates(parties: int, directory: Path) -> list[tuple[Path, Path, str]]:
    """Create P<i>.key / P<i>.pem in ``directory``; return (key, cert, hash) per party."""
    private_dir(directory)
    out = []
    for i in range(parties):
        key, pem = directory / f"P{i}.key", directory / f"P{i}.pem"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-days", "2", "-subj", f"/CN=P{i}", "-keyout", str(key),
                 "-out", str(pem))
        key.chmod(0o600)
        digest = _openssl("x509", "-hash", "-noout", "-in", str(pem)).strip()
        out.append((key, pem, digest))
    return out


def install_certificates(certs: list[tuple[Path, Path, str]], party: int,
                         player_data: Path) -> None:
    """Give a party its own key and everyone's certificate (with hash names)."""
    private_dir(player_data)
    for i, (key, pem, digest) in enumerate(certs):
        shutil.copyfile(pem, player_data / pem.name)
        shutil.copyfile(pem, player_data / f"{digest}.0")
        if i == party:
            copy_private(key, player_data / key.name)
