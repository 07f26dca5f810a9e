"""Test TLS certificates (trustme): one CA, one server certificate for the loopback hosts and test names."""

from __future__ import annotations

import atexit
import functools
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

#: The names and addresses the test server certificate holds.
SERVER_NAMES = (
    "localhost",
    "127.0.0.1",
    "127.0.0.2",
    "127.0.0.3",
    "127.0.0.4",
    "relay.test.example",
    "mx.test.example",
    "mx1.test.example",
    "mx2.test.example",
)


@dataclass(frozen=True)
class CertificateAuthority:
    """A throwaway CA and a server certificate it signed, with the CA also as a PEM file.

    `ca_file` is what `SSL_CERT_FILE` should point at for a client that
    verifies against "the system trust store" to trust the test servers.
    """

    ca: trustme.CA
    server: trustme.LeafCert
    ca_file: Path

    def server_context(self) -> ssl.SSLContext:
        """A server-side context presenting the test certificate (for aiosmtpd STARTTLS or implicit TLS)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.server.configure_cert(context)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that verifies against this CA only."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        self.ca.configure_trust(context)
        return context


@functools.cache
def certificate_authority() -> CertificateAuthority:
    """The process-wide test CA (made once; its PEM file removed at exit)."""
    ca = trustme.CA()
    server = ca.issue_cert(*SERVER_NAMES)
    directory = Path(tempfile.mkdtemp(prefix="mailqueue-test-ca-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return CertificateAuthority(ca=ca, server=server, ca_file=ca_file)


@pytest.fixture(scope="session")
def test_ca() -> CertificateAuthority:
    """The test CA: `.server_context()` for servers, `.ca_file` for `SSL_CERT_FILE`."""
    return certificate_authority()


__all__ = ["SERVER_NAMES", "CertificateAuthority", "certificate_authority", "test_ca"]
