"""Masking secrets out of text the queue keeps, raises, logs or shows: one set of rules for every secret."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote, unquote

MASK = "********"

#: `scheme://user:password@`: the userinfo of a URL that carries a password.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^:@/\s]*:)(?P<password>[^@/\s]+)(?=@)", re.IGNORECASE)


def mask_url_passwords(text: str, substitute: str = MASK) -> str:
    """`text` with the password of every URL in it replaced by `substitute`."""
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda match: match["head"] + substitute, text)


def spellings(password: str, username: str | None = None) -> set[str]:
    """The forms a password may take in a driver's or a server's text.

    As given, URL-quoted and unquoted (a password inside a URL), base64, and
    the two base64 strings AUTH PLAIN may put on the wire (a server may echo
    them: `535 bad credentials AHVzZXIAcGFzcw==`).
    """
    raw = password.encode("utf-8")
    user = (username or "").encode("utf-8")
    forms = {password, unquote(password), quote(password, safe="")}
    forms.update(
        base64.b64encode(secret).decode("ascii")
        for secret in (raw, b"\0" + user + b"\0" + raw, user + b"\0" + user + b"\0" + raw)
    )
    return {form for form in forms if form}


class SecretMask:
    """Replaces known passwords, in each of their `spellings`, and any URL's password with `MASK`.

    Every reply text, exception text, `QueueError` and log line that may hold
    a relay's or a store's password passes through one of these first.
    """

    def __init__(self, password: str | None = None, username: str | None = None) -> None:
        forms = spellings(password, username) if password else set()
        # longest first, so a secret that contains another is masked whole
        self._secrets = sorted(forms, key=len, reverse=True)

    def adding(self, password: str | None) -> SecretMask:
        """This mask and `password` (in every spelling); `self` when there is none."""
        if not password:
            return self
        mask = SecretMask()
        mask._secrets = sorted(set(self._secrets) | spellings(password), key=len, reverse=True)
        return mask

    def __call__(self, text: str) -> str:
        text = mask_url_passwords(text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __repr__(self) -> str:
        return f"SecretMask({len(self._secrets)} secrets)"


NO_SECRETS = SecretMask()

__all__ = ["MASK", "NO_SECRETS", "SecretMask", "mask_url_passwords", "spellings"]
