"""The rules a setting's value is checked with: each returns the value or raises `InvalidValueError`."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection, Mapping
from typing import Any

Validator = Callable[[Any], Any]


class InvalidValueError(Exception):
    """A value breaks its rule; the message says how, to follow the setting's name."""


def number(
    *, minimum: float = 0, exclusive: bool = True, integer: bool = False, maximum: float | None = None
) -> Validator:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidValueError(f"must be {'an integer' if integer else 'a number'}, not {type(value).__name__}")
        if integer and not isinstance(value, int):
            raise InvalidValueError("must be an integer")
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidValueError("must be a finite number")
        if (exclusive and value <= minimum) or (not exclusive and value < minimum):
            raise InvalidValueError(f"must be {'above' if exclusive else 'at least'} {minimum}")
        if maximum is not None and value > maximum:
            raise InvalidValueError(f"must be at most {maximum}")
        return value

    return check


def keyed(value: Any, keys: Collection[str], takes: str) -> Mapping[str, Any]:
    """`value`, a dict of some of `keys`; else `InvalidValueError` saying that it takes `takes`."""
    if not isinstance(value, Mapping):
        raise InvalidValueError(f"must be a dict with {takes}")
    unknown = sorted(str(key) for key in set(value) - set(keys))
    if unknown:
        raise InvalidValueError(f"has unknown keys {unknown}; it takes {takes}")
    return value


def optional(inner: Validator) -> Validator:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidValueError(f"must be True or False, not {value!r}")
    return value


def port(value: Any) -> int:
    result: int = number(integer=True, minimum=1, exclusive=False, maximum=65535)(value)
    return result


def hostname(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidValueError("must be a string")
    if not value:
        return ""
    if any(c in value for c in "\r\n\x00 \t") or len(value) > 253:
        raise InvalidValueError("must be a host name without spaces or line breaks")
    try:
        ipaddress.ip_address(value.strip("[]"))
        return value
    except ValueError:
        pass
    try:
        value.encode("idna")
    except UnicodeError as exc:
        raise InvalidValueError(f"is not a valid host name ({exc})") from None
    return value
