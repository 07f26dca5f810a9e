"""`manage.py mailqueue_dkim_keygen DOMAIN SELECTOR`: write a new DKIM private key, print the TXT record to publish."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...dkim import DkimEntry, DkimKeyError, load_key, zone_line
from ...validation import InvalidValueError
from ..options import domain

_ALGORITHMS = {
    "rsa": "rsa-sha256",
    "rsa-sha256": "rsa-sha256",
    "ed25519": "ed25519-sha256",
    "ed25519-sha256": "ed25519-sha256",
}


def generate_pem(algorithm: str, bits: int = 2048) -> bytes:
    """A new unencrypted private key in PEM (PKCS#8): RSA of `bits`, or Ed25519."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
    except ImportError:
        raise CommandError("DKIM keys need cryptography: install django-mailqueue[dkim]") from None
    key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    if algorithm == "rsa-sha256":
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    else:
        key = ed25519.Ed25519PrivateKey.generate()
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_private(path: Path, data: bytes, *, force: bool) -> None:
    """Write `data` to `path` readable by its owner only; an existing file only with `force`."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.chmod(path, 0o600)


class Command(BaseCommand):
    help = "Write a new DKIM private key for DOMAIN and SELECTOR (RSA-2048 by default) and print its DNS TXT record."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("domain", type=domain, help="the signing domain (d=), usually the From address's")
        parser.add_argument("selector", help="the selector (s=), e.g. mq1 or 2026-12")
        parser.add_argument("--algorithm", choices=sorted(_ALGORITHMS), default="rsa", help="rsa (default) or ed25519")
        parser.add_argument("--bits", type=int, default=2048, help="RSA key size (default 2048, at least 1024)")
        parser.add_argument("--output", default=None, help="where to write the key (default: DOMAIN.SELECTOR.pem)")
        parser.add_argument("--force", action="store_true", help="overwrite an existing file")

    def handle(self, *args: Any, **options: Any) -> None:
        from ...dkim import parse_dkim

        algorithm = _ALGORITHMS[options["algorithm"]]
        if algorithm == "rsa-sha256" and not 1024 <= options["bits"] <= 8192:
            raise CommandError("--bits must be from 1024 to 8192 (2048 is what receivers expect)")
        signing_domain, selector = options["domain"], options["selector"]
        path = Path(options["output"] or f"{signing_domain}.{selector}.pem")
        try:
            (entry,) = parse_dkim({signing_domain: {"SELECTOR": selector, "PRIVATE_KEY": str(path)}}).values()
        except InvalidValueError as exc:
            raise CommandError(f"mailqueue_dkim_keygen: {exc}") from None
        entry = DkimEntry(entry.from_domain, entry.domain, entry.selector, str(path), algorithm)
        pem = generate_pem(algorithm, options["bits"])
        try:
            write_private(path, pem, force=options["force"])
        except FileExistsError:
            raise CommandError(f"{path} exists; choose another --output, or --force to replace it") from None
        except OSError as exc:
            raise CommandError(f"{path} cannot be written: {exc.strerror}") from None
        try:
            key = load_key(entry)
        except DkimKeyError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Wrote the private key to {path} (mode 0600). Keep it secret; never commit it.")
        self.stdout.write("\nPublish this TXT record (zone-file syntax; the strings are joined):\n")
        self.stdout.write(f"  {zone_line(key)}\n")
        self.stdout.write("Then, in settings.py:\n")
        self.stdout.write(
            f'  MAILQUEUE["DKIM"] = {{"{entry.domain}": {{"SELECTOR": "{selector}", '
            f'"PRIVATE_KEY": "{path.resolve()}", "ALGORITHM": "{algorithm}"}}}}'
        )
