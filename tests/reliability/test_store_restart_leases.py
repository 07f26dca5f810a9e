"""A store restarted under load for longer than the lease: each item delivered again is told LEASE_LOST and
counted in the worker's summary (issue 18, point 13; docs/reliability.md, "How each duplicate shows").

Before: the items whose outcome could not be recorded before their lease ran out were delivered again by
another worker — expected — but told only as STORE_UNAVAILABLE, and the summaries said "0 leases lost".
Real PostgreSQL and Redis servers of the test's own (`tests/reliability/outage.py`), crashed and kept down
for 2 × LEASE + 1 s while two workers deliver.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.outage import OutageConfig, run_outage

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("private_servers")]


@pytest.mark.parametrize("store", ["postgres", "redis"])
def test_items_delivered_again_after_a_store_outage_are_told_lease_lost(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_outage(OutageConfig(store=store, directory=tmp_path))  # type: ignore[arg-type]

    with capsys.disabled():
        print(f"\n--- {store} down {report.down_seconds:.1f} s under load ---\n{report}")
    assert report.problems == [], report
    assert report.duplicated_pairs > 0 and report.untold == []
    assert sum(report.lease_lost_signals.values()) >= report.duplicated_items
    assert report.summary_leases_lost == report.lease_lost_signals
