"""The worker: claims due items, delivers them, records outcomes, retries, writes DSNs, tells signals."""

from .engine import Worker

__all__ = ["Worker"]
