"""Test helpers for projects and store authors: the store contract suite and a fake clock."""

from ..core.clock import FakeClock
from .contract import QueueStoreContract

__all__ = ["FakeClock", "QueueStoreContract"]
