"""An app for the fault run's worker processes: every `error` signal as a JSON line in a file.

Installed by `tests.reliability.settings` when `MAILQUEUE_REL_SIGNAL_LOG`
names the file, so the harness checks the signal payloads (codes, item
ids, texts) and not only the log lines.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from django.apps import AppConfig

_lock = threading.Lock()


def record_error(sender: Any, error: Any = None, item_id: Any = None, **kwargs: Any) -> None:
    path = os.environ.get("MAILQUEUE_REL_SIGNAL_LOG")
    if not path:
        return
    line = json.dumps(
        {
            "code": getattr(error, "code", None),
            "item_id": str(item_id) if item_id is not None else None,
            "text": str(error),
            "repr": repr(error),
        }
    )
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


class SignalLogConfig(AppConfig):
    name = "tests.reliability.signal_log"
    label = "reliability_signal_log"

    def ready(self) -> None:
        from django_mailqueue import signals

        signals.error.connect(record_error, dispatch_uid="reliability-signal-log")
