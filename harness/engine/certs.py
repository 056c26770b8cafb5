"""Per-run TLS certificates for the parties.

MP-SPDZ authenticates parties by certificates named ``P<i>.pem`` whose common
name is ``P<i>``, found through OpenSSL's hashed directory lookup. Fresh ones
for every run mean no key outlives its run.

They are made here (as ``openssl req -x509 -newkey ec`` would: a P-256 key, a
self-signed X.509 v3 certificate valid for two days, the basic constraints of a
CA), not by running ``openssl`` twice per party, which cost a run a few tenths of a
second. The ``cryptography`` library makes the key and the ECDSA signature; the
certificate around them, a few fixed DER fields (:func:`_certificate_der`), is
encoded here, because ``cryptography.x509`` took longer to import (30 to 60 ms)
than everything else a run does before its clients start but numpy. The tests
read every field back with ``cryptography.x509`` and ``openssl``.
:func:`subject_hash` is ``openssl x509 -hash``'s name for the file.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import shutil
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from harness.fileio import copy_private, open_private, private_dir

__all__ = ["make_certificates", "install_certificates", "subject_hash"]

# How far back a certificate is valid from (a host's clock a little behind ours), and
# for how long after.
_VALID_BEFORE = dt.timedelta(minutes=5)
_VALID_FOR = dt.timedelta(days=2)


def make_certificates(parties: int, directory: Path) -> list[tuple[Path, Path, str]]:
    """Create P<i>.key / P<i>.pem in ``directory``; return (key, cert, hash) per party."""
    private_dir(directory)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    out = []
    for i in range(parties):
        key, pem = directory / f"P{i}.key", directory / f"P{i}.pem"
        private = ec.generate_private_key(ec.SECP256R1())
        der = _certificate_der(private, f"P{i}", now - _VALID_BEFORE, now + _VALID_FOR)
        with open_private(key) as fh:  # private from its creation
            fh.write(private.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        pem.write_bytes(_pem("CERTIFICATE", der))
        out.append((key, pem, subject_hash(f"P{i}")))
    return out


# --- the certificate's DER (RFC 5280, section 4.1) ----------------------------------

_ECDSA_SHA256 = bytes.fromhex("06082a8648ce3d040302")  # OID 1.2.840.10045.4.3.2
_COMMON_NAME = bytes.fromhex("0603550403")  # OID 2.5.4.3
_BASIC_CONSTRAINTS = bytes.fromhex("0603551d13")  # OID 2.5.29.19
_TRUE = bytes.fromhex("0101ff")


def _tlv(tag: int, value: bytes) -> bytes:
    """One DER element: tag, definite length, value."""
    size = len(value)
    if size < 0x80:
        return bytes([tag, size]) + value
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + value


def _sequence(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _integer(value: int) -> bytes:
    """A non-negative INTEGER (a leading zero octet keeps its top bit clear)."""
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _time(when: dt.datetime) -> bytes:
    """UTCTime before 2050, GeneralizedTime from then on (RFC 5280, 4.1.2.5)."""
    if when.year < 2050:
        return _tlv(0x17, when.strftime("%y%m%d%H%M%SZ").encode())
    return _tlv(0x18, when.strftime("%Y%m%d%H%M%SZ").encode())


def _name(common_name: str) -> bytes:
    """The Name CN=``common_name``: one RDN of one UTF8String attribute."""
    attribute = _sequence(_COMMON_NAME, _tlv(0x0C, common_name.encode()))
    return _sequence(_tlv(0x31, attribute))


def _certificate_der(private: ec.EllipticCurvePrivateKey, common_name: str,
                     not_before: dt.datetime, not_after: dt.datetime) -> bytes:
    """A self-signed v3 certificate for ``private``'s public key, named ``common_name``,
    with basic constraints CA:TRUE (critical), signed ECDSA with SHA-256."""
    algorithm = _sequence(_ECDSA_SHA256)
    name = _name(common_name)
    # A random positive serial of at most 159 bits (RFC 5280: at most 20 octets).
    serial = int.from_bytes(os.urandom(20), "big") >> 1 or 1
    spki = private.public_key().public_bytes(serialization.Encoding.DER,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    constraints = _sequence(_BASIC_CONSTRAINTS, _TRUE, _tlv(0x04, _sequence(_TRUE)))
    tbs = _sequence(
        _tlv(0xA0, _integer(2)),  # version: v3
        _integer(serial), algorithm, name,  # issuer: itself
        _sequence(_time(not_before), _time(not_after)), name, spki,
        _tlv(0xA3, _sequence(constraints)))
    signature = private.sign(tbs, ec.ECDSA(hashes.SHA256()))
    return _sequence(tbs, algorithm, _tlv(0x03, b"\x00" + signature))


def _pem(label: str, der: bytes) -> bytes:
    text = base64.b64encode(der).decode()
    lines = [text[k:k + 64] for k in range(0, len(text), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""]).encode()


def subject_hash(common_name: str) -> str:
    """OpenSSL's subject hash (``X509_NAME_hash``) of the name CN=``common_name``.

    The first four bytes, little-endian, of the SHA-1 of the name's canonical
    encoding: its RDN sets without the outer SEQUENCE, each value a UTF8String
    lower-cased with its spaces collapsed (ASCII names here).
    """
    value = " ".join(common_name.split()).lower().encode()
    if len(value) > 127:
        raise ValueError(f"common name too long for this encoder: {common_name!r}")
    oid = bytes([0x06, 0x03, 0x55, 0x04, 0x03])  # 2.5.4.3, commonName
    attribute = bytes([0x0C, len(value)]) + value  # UTF8String
    sequence = bytes([0x30, len(oid) + len(attribute)]) + oid + attribute
    rdn = bytes([0x31, len(sequence)]) + sequence
    return f"{int.from_bytes(hashlib.sha1(rdn).digest()[:4], 'little'):08x}"


def install_certificates(certs: list[tuple[Path, Path, str]], party: int,
                         player_data: Path) -> None:
    """Give a party its own key and everyone's certificate (with hash names)."""
    private_dir(player_data)
    for i, (key, pem, digest) in enumerate(certs):
        shutil.copyfile(pem, player_data / pem.name)
        shutil.copyfile(pem, player_data / f"{digest}.0")
        if i == party:
            copy_private(key, player_data / key.name)
