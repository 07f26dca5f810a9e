"""The errors the queue raises, at their public path: `QueueError` and its `Code`s (defined in `core.errors`)."""

from __future__ import annotations

from .core.errors import CODES, INPUT_CODES, Code, QueueError, QueueInputError, QueueSettingsError

__all__ = ["CODES", "INPUT_CODES", "Code", "QueueError", "QueueInputError", "QueueSettingsError"]
