"""One-dimensional PostgreSQL arrays written in their binary format by hand (one `bytes` a column), for the batch
add's columns: psycopg's generic list dumper looks up a dumper and checks every element in Python."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Self

#: `array_recv`'s header for one dimension: ndim, has-nulls, the element type, the length, the lower bound.
_HEADER = struct.Struct(">iiIii")
_LENGTH = struct.Struct(">i").pack
#: A UUID element's length, before each one.
_UUID_SIZE = (16).to_bytes(4, "big")


class PackedArray:
    """An array's binary form, sent as it is: a parameter whose placeholder is `%b` and whose type is the
    subclass's `oid` (the statement's cast says the same)."""

    __slots__ = ("data",)
    #: the array type's oid (`pg_type.oid`) and its element type's
    oid: ClassVar[int] = 0
    element_oid: ClassVar[int] = 0

    def __init__(self, data: bytes) -> None:
        self.data = data

    @classmethod
    def of_varlena(cls, values: Sequence[bytes]) -> PackedArray:
        """Elements of variable length, each as its bytes in the element type's binary form."""
        parts = [_HEADER.pack(1, 0, cls.element_oid, len(values), 1)]
        for value in values:
            parts += (_LENGTH(len(value)), value)
        return cls(b"".join(parts))


class UuidArray(PackedArray):
    oid, element_oid = 2951, 2950

    @classmethod
    def of(cls, values: Sequence[uuid.UUID]) -> UuidArray:
        head = _HEADER.pack(1, 0, cls.element_oid, len(values), 1)
        return cls(b"".join([head, *[_UUID_SIZE + v.bytes for v in values]]))


class _IntArray(PackedArray):
    """Integers of the element type's `width` in bytes, big-endian, each after its length."""

    width: ClassVar[int] = 0

    @classmethod
    def of(cls, values: Sequence[int]) -> Self:
        head = _HEADER.pack(1, 0, cls.element_oid, len(values), 1)
        size, width = _LENGTH(cls.width), cls.width
        return cls(b"".join([head, *[size + v.to_bytes(width, "big", signed=True) for v in values]]))


class Int8Array(_IntArray):
    oid, element_oid, width = 1016, 20, 8


class Int2Array(_IntArray):
    oid, element_oid, width = 1005, 21, 2


class TextArray(PackedArray):
    oid, element_oid = 1009, 25

    @classmethod
    def of(cls, values: Iterable[str]) -> PackedArray:
        """UTF-8, the client encoding Django sets on every connection; the stores refuse what UTF-8 cannot
        hold (a lone surrogate) and what no text may (NUL) before anything is written."""
        return cls.of_varlena([value.encode("utf-8") for value in values])


class ByteaArray(PackedArray):
    oid, element_oid = 1001, 17


def register(cursor: Any) -> None:
    """Let `cursor` (a psycopg 3 cursor) send every `PackedArray` as it is, in binary."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    for array in (UuidArray, Int8Array, Int2Array, TextArray, ByteaArray):

        class _Sent(Dumper):
            format = Format.BINARY
            oid = array.oid

            def dump(self, obj: PackedArray) -> bytes:
                return obj.data

        cursor.adapters.register_dumper(array, _Sent)
