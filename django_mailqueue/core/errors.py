"""The errors the queue raises: `QueueError`, told apart by its `Code`; input errors are also `ValueError`s."""

from __future__ import annotations

from enum import StrEnum

from django.core.exceptions import ImproperlyConfigured


class Code(StrEnum):
    """What a `QueueError` is about; each value is the documented string (`Code.FULL == "FULL"`)."""

    INVALID = "INVALID"
    FULL = "FULL"
    TOO_LARGE = "TOO_LARGE"
    LEASE_LOST = "LEASE_LOST"
    MESSAGE_UNREADABLE = "MESSAGE_UNREADABLE"
    INVALID_OPTION = "INVALID_OPTION"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    DSN_FAILED = "DSN_FAILED"
    INTERNAL = "INTERNAL"
    REPLY_LOST = "REPLY_LOST"
    TLS_POLICY = "TLS_POLICY"


#: Every code a `QueueError` may carry, with what it means.
CODES: dict[Code, str] = {
    Code.INVALID: "the input cannot be queued as it is (an address, a header, a NUL, ...)",
    Code.FULL: "the queue holds MAX_ITEMS items already",
    Code.TOO_LARGE: "the message is larger than MAX_MESSAGE_SIZE",
    Code.LEASE_LOST: "the worker no longer holds the item's lease; nothing was recorded",
    Code.MESSAGE_UNREADABLE: "the store holds the item but lost its message",
    Code.INVALID_OPTION: "a setting or a route's option is wrong",
    Code.STORE_UNAVAILABLE: "the store cannot be reached or refused the operation",
    Code.DSN_FAILED: "a delivery status notification could not be queued",
    Code.INTERNAL: "a bug: an attempt failed unexpectedly; the traceback is in the log",
    Code.REPLY_LOST: "the reply after the final '.' was lost: the message may have been delivered, and is tried again",
    Code.TLS_POLICY: "a recipient domain's MTA-STS policy was not met (enforce: deferred 4.7.5; testing: sent anyway)",
}

#: The codes that blame the caller's input: their errors are `QueueInputError`s, so also `ValueError`s.
INPUT_CODES = frozenset({Code.INVALID, Code.TOO_LARGE})


class QueueError(Exception):
    """An error of the queue; `code` (a `Code`) says which, the message says why.

    The message never holds a secret: relay passwords and the passwords of
    database or Redis URLs are masked before a `QueueError` is made.

    `QueueError(code, ...)` with a code of `INPUT_CODES` makes a
    `QueueInputError`, which is also a `ValueError`, as Django's SMTP
    backend raises for a bad address.
    """

    def __new__(cls, *args: object, **kwargs: object) -> QueueError:
        if cls is QueueError and args and args[0] in INPUT_CODES:
            cls = QueueInputError
        return super().__new__(cls, *args)

    def __init__(self, code: Code | str, message: str, *, item_id: object | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown QueueError code {code!r}")
        super().__init__(message)
        self.code = Code(code)
        self.message = message
        self.item_id = item_id

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"QueueError({self.code.value!r}, {self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.code.value, self.message, self.item_id))


class QueueInputError(QueueError, ValueError):
    """A `QueueError` about the caller's input (`INVALID`, `TOO_LARGE`): `except ValueError` catches it too."""


def _rebuild(code: str, message: str, item_id: object | None) -> QueueError:
    return QueueError(code, message, item_id=item_id)


class QueueSettingsError(QueueError, ImproperlyConfigured):
    """A `MAILQUEUE` setting is wrong; the message names the key."""

    def __init__(self, message: str, *, check_id: str = "") -> None:
        super().__init__(Code.INVALID_OPTION, message)
        self.check_id = check_id
