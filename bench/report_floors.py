"""The enqueue floors in bench/RESULTS.md: their tables, and ours ÷ floor paired repeat by repeat (report.py calls it).

Each floor runs right after ours' run it judges (bench/measure_enqueue.py), and each of those runs records its
repeat (`rep`): ours ÷ floor is the median of the repeats' own ratios, which the VM's drift between repeats
(tens of per cent within minutes) moves far less than a ratio of two medians. Beside it, the same ratio of the
CPU seconds a message, which the disk's latency does not move.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Protocol

BULK_LAYOUTS = ("one_row", "split")


class Series(Protocol):
    def get(self, measure: str, config: str) -> dict[str, Any] | None: ...
    def median(self, measure: str, config: str) -> float | None: ...
    def cell(self, measure: str, config: str, fmt: str = "rate") -> str: ...


def by_rep(r: Series, measure: str, config: str, key: str | None = None) -> dict[int, float]:
    """{repeat: rate} of a series (or {repeat: msg/s of CPU} with key="cpu"), for the runs that say their repeat."""
    s = r.get(measure, config)
    if not s or s.get("status") not in (None, "ok"):
        return {}
    out: dict[int, float] = {}
    for rate, run in zip(s.get("samples", []), s.get("runs", []), strict=False):
        if not isinstance(run.get("rep"), int):
            continue
        if key == "cpu":
            if run.get("cpu_seconds"):
                out[run["rep"]] = run["count"] / run["cpu_seconds"]
        else:
            out[run["rep"]] = rate
    return out


def bulk_layout(r: Series) -> str | None:
    """The bulk floor's faster layout over the run (the higher median), so no repeat picks its luckier sample."""
    s = r.get("enqueue.bulk_floor", "sqlite")
    if not s or not s.get("runs"):
        return None
    medians = {}
    for layout in BULK_LAYOUTS:
        rates = [run["count"] / run["layouts"][layout] for run in s["runs"] if layout in run.get("layouts", {})]
        if rates:
            medians[layout] = statistics.median(rates)
    return max(medians, key=lambda layout: medians[layout]) if medians else None


def bulk_by_rep(r: Series) -> dict[int, float]:
    """{repeat: the bulk floor's rate in `bulk_layout`}."""
    layout, s = bulk_layout(r), r.get("enqueue.bulk_floor", "sqlite")
    if layout is None or s is None:
        return {}
    return {
        run["rep"]: run["count"] / run["layouts"][layout]
        for run in s["runs"]
        if isinstance(run.get("rep"), int) and layout in run.get("layouts", {})
    }


def paired(ours: dict[int, float], floor: dict[int, float]) -> float | None:
    """The median over the repeats both ran in of ours ÷ floor."""
    common = sorted(set(ours) & set(floor))
    return statistics.median(ours[k] / floor[k] for k in common) if common else None


#: (floor's measure, its config, ours' measure, ours' config) of each floor, by name
FLOORS: dict[str, tuple[str, str, str, str]] = {
    "commit-sqlite": ("enqueue.floor", "sqlite", "enqueue.single", "ours-sqlite"),
    "commit-postgres": ("enqueue.floor", "postgres", "enqueue.single", "ours-postgres"),
    "promised": ("enqueue.promised_floor", "sqlite", "enqueue.single", "ours-sqlite"),
    "bulk": ("enqueue.bulk_floor", "sqlite", "enqueue.batch", "ours-sqlite"),
}


def floor_rates(r: Series, name: str, key: str | None = None) -> dict[int, float]:
    measure, config, _, _ = FLOORS[name]
    if name == "bulk" and key is None:
        return bulk_by_rep(r)
    return by_rep(r, measure, config, key)


def share(r: Series, name: str, key: str | None = None) -> float | None:
    """Ours ÷ the floor `name`, paired by repeat (rates, or CPU with key="cpu"); None when not measured so."""
    _, _, measure, config = FLOORS[name]
    found = paired(by_rep(r, measure, config, key), floor_rates(r, name, key))
    if found is None and key is None:  # a run from before floors recorded their repeat: the medians' ratio
        ours, floor = r.median(measure, config), floor_median(r, name)
        return ours / floor if ours and floor else None
    return found


def floor_median(r: Series, name: str) -> float | None:
    rates = list(floor_rates(r, name).values())
    if rates:
        return statistics.median(rates)
    measure, config, _, _ = FLOORS[name]
    return r.median(measure, config)  # a run from before floors recorded their repeat


def _pct(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value else "—"


def tables(r: Series, w: Callable[[str], None], fmt: Callable[[float, str], str], best: Callable[..., Any]) -> None:
    """The floors' paragraphs and tables; `best(measure, store)` gives the faster peer's (rate, name)."""
    if any(floor_median(r, f"commit-{db}") for db in ("sqlite", "postgres")):
        w(
            "**The commit floor** (`bench/commit_floor.py`): one-row `INSERT` + `COMMIT` a message straight through "
            "the driver (sqlite3, psycopg) into a table of a key and the message's bytes — no Django, no queue, "
            "the same database settings. A `send_mail()` that returns once the message is stored pays at least this "
            "commit, so `floor ÷ faster peer` is the most any library's one-a-call enqueue can reach over the peers "
            "in this run. **The promised floor** (`bench/promised_floor.py`, SQLite): Django's `send_mail()` into a "
            "backend doing only what the queue promises when the call returns — our `message_to_item` (the exact "
            "bytes, the envelope, bad input refused, the size limit, the id) and one row a message, claimable, "
            "committed straight through sqlite3. Each floor runs right after ours' run it judges; `ours ÷ floor` is "
            "the median of the repeats' own ratios, and the same of the CPU seconds a message:"
        )
        w("")
        w("| store | floor | rate | faster peer, one a call | floor ÷ faster peer | ours ÷ floor | by CPU |")
        w("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        rows = (("commit-sqlite", "SQLite", "commit"), ("promised", "SQLite", "promised"))
        for name, store_name, what in (*rows, ("commit-postgres", "PostgreSQL", "commit")):
            measure, config, _, _ = FLOORS[name]
            fl = floor_median(r, name)
            if not fl:
                continue
            peer, who = best("enqueue.single", "sqlite" if store_name == "SQLite" else "postgres")
            reach = f"{fl / peer:.2f}×" if peer else "—"
            w(
                f"| {store_name} | {what} | {r.cell(measure, config)} | {fmt(peer, 'rate') if peer else '—'} ({who}) "
                f"| {reach} | {_pct(share(r, name))} | {_pct(share(r, name, 'cpu'))} |"
            )
        w("")
    fl = floor_median(r, "bulk")
    if fl:
        peer, who = best("enqueue.batch", "sqlite")
        w(
            "**The bulk floor** (`bench/bulk_floor.py`, SQLite): `send_mass_mail()`'s batches of 100 doing only what "
            "the queue promises when the call returns — Django's `EmailMessage`, our `message_to_item` and one row a "
            "message, claimable, straight through sqlite3, one transaction a batch, in the faster of two layouts "
            f"over the run (here `{bulk_layout(r)}`). No design that keeps those promises is faster. It runs right "
            "after ours' batches in every repeat; `ours ÷ floor` as above:"
        )
        w("")
        w("| store | bulk floor | faster peer, batches | floor ÷ faster peer | ours ÷ floor | by CPU |")
        w("| --- | ---: | ---: | ---: | ---: | ---: |")
        rates = sorted(floor_rates(r, "bulk").values())
        cell = f"{fmt(fl, 'rate')} ({fmt(rates[0], 'rate')}–{fmt(rates[-1], 'rate')})" if rates else fmt(fl, "rate")
        reach = f"{fl / peer:.2f}×" if peer else "—"
        w(
            f"| SQLite | {cell} | {fmt(peer, 'rate') if peer else '—'} ({who}) | {reach} | {_pct(share(r, 'bulk'))} "
            f"| {_pct(share(r, 'bulk', 'cpu'))} |"
        )
        w("")
