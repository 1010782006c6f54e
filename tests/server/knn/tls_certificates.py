"""Throw-away certificates for the TLS tests of this room: a CA, certificates it signs, and their PEM
files. Imported by the test modules here (pytest's prepend import mode puts this folder on
``sys.path``)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def certificate(common_name: str, issuer_key=None, issuer: x509.Name | None = None):
    """``(key, certificate)`` for ``common_name`` (also its DNS subject alternative name), valid
    for a day: a self-signed CA without ``issuer``, else signed by ``issuer_key`` as ``issuer``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
    )
    return key, builder.sign(issuer_key or key, hashes.SHA256())


def write_pem(directory: Path, name: str, key, certificate: x509.Certificate) -> tuple[Path, Path]:
    """``name.key`` (PKCS#8, unencrypted) and ``name.pem`` in ``directory``: their paths."""
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path
