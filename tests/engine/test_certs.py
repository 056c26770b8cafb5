"""Per-run certificates: what ``openssl`` itself reads in them, and their files' modes.

They are made in-process; OpenSSL (the real command) must find each party's
certificate under the hash name written for it, read the subject MP-SPDZ checks,
and each run must get new keys.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from harness.engine import make_certificates

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def test_certificates_are_what_openssl_reads_and_private(tmp_path: Path) -> None:
    certs = make_certificates(12, tmp_path / "certs")
    assert stat.S_IMODE((tmp_path / "certs").stat().st_mode) == 0o700
    for i, (key, pem, digest) in enumerate(certs):
        assert digest == _openssl("x509", "-hash", "-noout", "-in", str(pem))
        assert _openssl("x509", "-noout", "-subject", "-in", str(pem)) == f"subject=CN = P{i}"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        # the key is the certificate's: the same public key from both
        assert (_openssl("pkey", "-pubout", "-in", str(key))
                == _openssl("x509", "-noout", "-pubkey", "-in", str(pem)))
        # self-signed and valid now (verify against itself as the only trust anchor)
        assert _openssl("verify", "-CAfile", str(pem), str(pem)).endswith(": OK")
    again = make_certificates(1, tmp_path / "again")
    assert again[0][1].read_bytes() != certs[0][1].read_bytes()  # fresh for every run
