"""Test certificates made with ``cryptography``: a self-signed server certificate, or a CA and a
server certificate it signed; each for 127.0.0.1 and localhost, valid for a day."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_SAN = x509.SubjectAlternativeName(
    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
)


Key = ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: Key, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def _cert(subject: str, issuer: str, key: Key, signer: Key, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca or subject == issuer:
        builder = builder.add_extension(_SAN, critical=False)
    return builder.sign(signer, hashes.SHA256())


def self_signed(where: Path) -> tuple[Path, Path]:
    """(certificate, key) files of a self-signed server certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("paddlecloud test server", "paddlecloud test server", key, key, ca=True)
    (where / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return where / "server.pem", _write_key(key, where / "server.key")


def ca_signed(where: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) files."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("paddlecloud test CA", "paddlecloud test CA", ca_key, ca_key, ca=True)
    leaf = _cert("paddlecloud test server", "paddlecloud test CA", key, ca_key, ca=False)
    (where / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (where / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    return where / "ca.pem", where / "leaf.pem", _write_key(key, where / "leaf.key")
