"""The overview page's data: outcomes per hour over the last day from the history, laid out as SVG bars."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncHour

from ..models import DeliveryRecord

#: The chart's drawing area, in SVG user units (whole numbers: nothing is localized).
CHART_WIDTH = 760
CHART_HEIGHT = 160
CHART_LEFT = 40
CHART_BOTTOM = 20


@dataclass(frozen=True)
class HourBar:
    """One hour of the chart: its counts and where its bars go."""

    start: datetime
    delivered: int
    failed: int
    deferred: int
    x: int
    delivered_y: int
    delivered_height: int
    failed_x: int
    failed_y: int
    failed_height: int
    #: an axis label under this hour ("" for none)
    label: str


@dataclass(frozen=True)
class HourlyChart:
    bars: list[HourBar]
    start: datetime
    end: datetime
    peak: int
    delivered: int
    failed: int
    deferred: int
    bar_width: int
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = CHART_LEFT
    plot_bottom: int = CHART_HEIGHT - CHART_BOTTOM

    @property
    def empty(self) -> bool:
        return self.delivered + self.failed + self.deferred == 0


def hourly_outcomes(*, now: datetime, alias: str, hours: int = 24) -> HourlyChart:
    """Delivered, failed and deferred records per hour for the `hours` hours up to `now`, in one query."""
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    counts: dict[tuple[int, str], int] = {}
    rows = (
        DeliveryRecord.objects.using(alias)
        .filter(recorded__gte=start, recorded__lt=end)
        .annotate(hour=TruncHour("recorded", tzinfo=UTC))
        .values("hour", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        hour: datetime = row["hour"]
        index = int((hour.astimezone(UTC) - start).total_seconds() // 3600)
        if 0 <= index < hours:
            counts[(index, row["state"])] = counts.get((index, row["state"]), 0) + row["n"]
    peak = max([n for (_, state), n in counts.items() if state in ("delivered", "failed")], default=0)
    plot_height = CHART_HEIGHT - CHART_BOTTOM - 10
    slot = (CHART_WIDTH - CHART_LEFT) // hours
    bar_width = max(2, (slot - 4) // 2)
    bars = []
    for index in range(hours):
        delivered = counts.get((index, "delivered"), 0)
        failed = counts.get((index, "failed"), 0)
        delivered_height = round(plot_height * delivered / peak) if peak else 0
        failed_height = round(plot_height * failed / peak) if peak else 0
        x = CHART_LEFT + index * slot + 2
        hour_start = start + timedelta(hours=index)
        bars.append(
            HourBar(
                start=hour_start,
                delivered=delivered,
                failed=failed,
                deferred=counts.get((index, "deferred"), 0),
                x=x,
                delivered_y=CHART_HEIGHT - CHART_BOTTOM - delivered_height,
                delivered_height=delivered_height,
                failed_x=x + bar_width,
                failed_y=CHART_HEIGHT - CHART_BOTTOM - failed_height,
                failed_height=failed_height,
                label=hour_start.strftime("%H:00") if index % 3 == 0 else "",
            )
        )
    return HourlyChart(
        bars=bars,
        start=start,
        end=end,
        peak=peak,
        delivered=sum(b.delivered for b in bars),
        failed=sum(b.failed for b in bars),
        deferred=sum(b.deferred for b in bars),
        bar_width=bar_width,
    )
