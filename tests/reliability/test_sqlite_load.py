"""`send_mail()` on SQLite under load, on Django's default settings (issue 18, point 12).

Two `mailqueue_work` processes deliver while 4 processes × 8 threads call
`send_mail()` — 1,600 messages — on a SQLite file with no `OPTIONS` at all
(Python's 5 s busy timeout, the rollback journal). Before the store waited for
the write lock itself, calls raised `QueueError: STORE_UNAVAILABLE … database
is locked` (10 of 10 runs on the development machine under other load, 12 to 65
calls a run) and the workers signalled the same error. See
`tests/reliability/sqlite_load.py` for the checks; `python -m
tests.reliability.sqlite_load 10` runs it ten times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.sqlite_load import SqliteLoadConfig, run_sqlite_load

pytestmark = pytest.mark.slow


def test_send_mail_under_load_on_djangos_default_sqlite_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_sqlite_load(SqliteLoadConfig(messages=1600, processes=4, threads=8, workers=2, directory=tmp_path))

    with capsys.disabled():
        print(f"\n--- SQLite contention run ---\n{report.summary()}")
    assert report.journal_mode == "delete"  # Django's default: no WAL
    assert report.problems == [], report.summary()
    assert report.calls == 1600 and report.raised == [] and report.delivered == 1600
