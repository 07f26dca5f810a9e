"""Masking a relay's password out of any text delivery keeps, raises or logs."""

from __future__ import annotations

import base64

MASK = "********"


class SecretMask:
    """Replaces a password — and the base64 forms AUTH puts on the wire — with `MASK`.

    A server may echo what it was sent (`535 bad credentials AHVzZXIAcGFzcw==`),
    and aiosmtplib's exceptions carry the server's text: every reply text,
    exception text, `QueueError` and log line made during a relay session
    passes through one of these first.
    """

    def __init__(self, password: str | None, username: str | None = None) -> None:
        secrets: set[str] = set()
        if password:
            secrets.add(password)
            raw = password.encode("utf-8")
            secrets.add(base64.b64encode(raw).decode("ascii"))
            user = (username or "").encode("utf-8")
            secrets.add(base64.b64encode(b"\0" + user + b"\0" + raw).decode("ascii"))
            secrets.add(base64.b64encode(user + b"\0" + user + b"\0" + raw).decode("ascii"))
        # longest first, so a secret that contains another is masked whole
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __repr__(self) -> str:
        return f"SecretMask({len(self._secrets)} secrets)"


NO_SECRETS = SecretMask(None)

__all__ = ["MASK", "NO_SECRETS", "SecretMask"]
