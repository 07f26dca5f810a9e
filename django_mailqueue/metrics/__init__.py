"""Prometheus metrics (the `prometheus` extra): the worker's, served by `mailqueue_work --metrics-port`
(`metrics.worker`), and the queue's depth for a site's own /metrics (`metrics.collector`). See docs/metrics.md.

This module imports prometheus_client only to see whether it is there, so it can say what is missing.
"""

from __future__ import annotations

#: What to tell someone who asked for metrics without prometheus_client installed.
NEEDS_EXTRA = (
    "Prometheus metrics need the prometheus_client package, which django-mailqueue installs as its "
    "'prometheus' extra: pip install 'django-mailqueue[prometheus]'"
)


def prometheus_installed() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True
