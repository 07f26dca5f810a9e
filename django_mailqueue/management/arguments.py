"""Argument types of the management commands that need nothing of the queue: `mailqueue_work` takes these
without importing the bulk actions' selection (`management/options.py`)."""

from __future__ import annotations

import argparse


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number
