"""The worker: claims due items, delivers them, records outcomes, retries, writes DSNs, tells signals."""

from .engine import Worker, WorkerStats
from .factory import build_worker

__all__ = ["Worker", "WorkerStats", "build_worker"]
