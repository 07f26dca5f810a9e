"""The suppression list's part of the store contract: addresses the worker fails at once, without trying."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from ..core.items import Suppression


class SuppressionContract(abc.ABC):
    """The suppression list a store keeps (docs/deliverability.md): entries keyed by `Suppression.address` as
    the caller gives it (`suppression.suppression_key`); an entry applies while its `since` is at or after the
    cut-off the caller gives (now - SUPPRESSION["DAYS"]). A base of `QueueStore`; its async twin
    (`asuppressed`) is `QueueStore`'s."""

    @abc.abstractmethod
    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        """The entries of `addresses` put on the list at or after `since`, by address: one round trip for
        them all (the worker asks once per claimed batch)."""

    @abc.abstractmethod
    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> list[Suppression]:
        """A page of the entries put on the list at or after `since`, the newest first, then by address;
        `search`: a case-insensitive part of the address."""

    @abc.abstractmethod
    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        """How many entries `list_suppressed` pages through."""

    @abc.abstractmethod
    def suppress(self, entries: Sequence[Suppression]) -> None:
        """Put the entries on the list, in one step; an address listed already is replaced."""

    @abc.abstractmethod
    def unsuppress(self, addresses: Sequence[str]) -> int:
        """Take the addresses off the list, in one step; how many were on it."""

    @abc.abstractmethod
    def prune_suppressed(self, *, before: datetime) -> int:
        """Drop the entries put on the list before `before`; how many."""
