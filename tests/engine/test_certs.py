"""Per-run certificates: what ``openssl`` itself reads in them, and their files' modes.

They are made in-process, or by the signer ``ltm`` forks as it starts; OpenSSL
(the real command) must find each party's certificate under the hash name written
for it, read the subject MP-SPDZ checks, and each run must get new keys, whichever
made them, and also once the signer is gone.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.engine import make_certificates
from harness.stream import pid_alive

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


# Makes certificates in a process of its own (the signer is forked, which the test's
# process must not be): argv[1] says by whom; prints their paths and the signer's pid.
_MAKE = """
import json, os, signal, sys
from pathlib import Path
from harness.engine import certs
how, out = sys.argv[1], Path(sys.argv[2])
if how != "here":
    certs.start_signer()
pid = certs._signer.pid if certs._signer else None
if how == "signer-killed":
    os.kill(pid, signal.SIGKILL)
made = [certs.make_certificates(12, out / "certs"), certs.make_certificates(1, out / "again")]
print(json.dumps({"made": [[[str(k), str(p), h] for k, p, h in m] for m in made],
                  "loaded x509": "cryptography.x509" in sys.modules, "signer": pid,
                  "signing": certs._signer is not None}))
"""


def _made(how: str, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _MAKE, how, str(out)], capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("how", ["here", "signer", "signer-killed"])
def test_certificates_are_what_openssl_reads_and_private(tmp_path: Path, how: str) -> None:
    made = _made(how, tmp_path)
    # made by the signer, this process never loads the X.509 modules; once it is gone,
    # here, as without one
    assert made["loaded x509"] == (how != "signer")
    assert made["signing"] == (how == "signer")
    certs = [tuple(Path(p) for p in entry[:2]) + (entry[2],) for entry in made["made"][0]]
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
    again = Path(made["made"][1][0][1])
    assert again.read_bytes() != certs[0][1].read_bytes()  # fresh for every run
    assert again.read_bytes() != make_certificates(1, tmp_path / "here")[0][1].read_bytes()
    if made["signer"] is not None:  # the signer ended with the process that forked it
        deadline = time.monotonic() + 10
        while pid_alive(made["signer"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(made["signer"])
