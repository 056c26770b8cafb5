"""Per-run certificates: what ``openssl`` itself reads in them, and their files' modes.

They are made in-process; OpenSSL (the real command) must find each party's
certificate under the hash name written for it, read the subject MP-SPDZ checks,
and each run must get new keys. Their DER is encoded by the harness, so every
field is also read back with ``cryptography.x509``.
"""

from __future__ import annotations

import datetime as dt
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


def test_every_field_is_the_self_signed_v3_certificate_asked_for(tmp_path: Path) -> None:
    """The DER is encoded here: each field read back by ``cryptography.x509``, and the
    signature checked with the certificate's own key (the key file's)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    before = dt.datetime.now(dt.timezone.utc)
    certs = make_certificates(3, tmp_path / "certs")
    after = dt.datetime.now(dt.timezone.utc)
    serials = set()
    for i, (key, pem, _) in enumerate(certs):
        cert = x509.load_pem_x509_certificate(pem.read_bytes())
        assert cert.version is x509.Version.v3
        name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, f"P{i}")])
        assert cert.subject == name and cert.issuer == name
        assert 0 < cert.serial_number < 2**159
        serials.add(cert.serial_number)
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        assert (before.replace(microsecond=0) - dt.timedelta(minutes=5) <= start
                <= after - dt.timedelta(minutes=5))
        assert end - start == dt.timedelta(days=2, minutes=5)
        [extension] = cert.extensions
        assert extension.critical
        assert extension.value == x509.BasicConstraints(ca=True, path_length=None)
        assert cert.signature_algorithm_oid == x509.SignatureAlgorithmOID.ECDSA_WITH_SHA256
        public = cert.public_key()
        assert isinstance(public, ec.EllipticCurvePublicKey)
        assert public.curve.name == "secp256r1"
        public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
        assert private.public_key() == public
    assert len(serials) == 3


def test_a_validity_from_2050_on_is_a_generalized_time() -> None:
    """RFC 5280: UTCTime through 2049, GeneralizedTime after (what a reader then
    takes for the year)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from harness.engine.certs import _certificate_der

    start = dt.datetime(2049, 12, 31, 23, 0, tzinfo=dt.timezone.utc)
    der = _certificate_der(ec.generate_private_key(ec.SECP256R1()), "P0", start,
                           start + dt.timedelta(days=2))
    cert = x509.load_der_x509_certificate(der)
    assert cert.not_valid_before_utc == start
    assert cert.not_valid_after_utc == dt.datetime(2050, 1, 2, 23, 0, tzinfo=dt.timezone.utc)
