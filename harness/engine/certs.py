"""Per-run TLS certificates for the parties.

MP-SPDZ authenticates parties by certificates named ``P<i>.pem`` whose common
name is ``P<i>``, found through OpenSSL's hashed directory lookup. Fresh ones
for every run mean no key outlives its run.

They are made here with the ``cryptography`` library (as ``openssl req -x509
-newkey ec`` would: a P-256 key, a self-signed certificate valid for two days),
not by running ``openssl`` twice per party, which cost a run a few tenths of a
second; :func:`subject_hash` is ``openssl x509 -hash``'s name for the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness.fileio import copy_private, open_private, private_dir

__all__ = ["make_certificates", "install_certificates", "subject_hash"]


def make_certificates(parties: int, directory: Path) -> list[tuple[Path, Path, str]]:
    """Create P<i>.key / P<i>.pem in ``directory``; return (key, cert, hash) per party."""
    private_dir(directory)
    now = dt.datetime.now(dt.timezone.utc)
    out = []
    for i in range(parties):
        key, pem = directory / f"P{i}.key", directory / f"P{i}.pem"
        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"P{i}")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(private.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(private, hashes.SHA256()))
        with open_private(key) as fh:  # private from its creation
            fh.write(private.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out.append((key, pem, subject_hash(f"P{i}")))
    return out


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
