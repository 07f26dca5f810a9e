"""`LogLimit`: which repeats of an operator's warning to log — the first, then one per key and interval."""

from __future__ import annotations

from collections.abc import Hashable

#: Seconds between two WARNING lines about the same problem of the same destination.
WARNING_INTERVAL = 60.0


class LogLimit:
    """Admits the first warning of each key, then at most one per `interval` seconds; those held back in
    between are counted, and the count goes with the next one admitted. Pure: the caller gives the time.

    At most `max_keys` keys are remembered; when full, the keys whose interval has passed are forgotten,
    and if none has, the oldest half.
    """

    def __init__(self, interval: float = WARNING_INTERVAL, *, max_keys: int = 1024) -> None:
        self.interval = interval
        self.max_keys = max_keys
        #: key -> [when it was last admitted, how many were held back since]
        self._keys: dict[Hashable, list[float]] = {}

    def admit(self, key: Hashable, now: float) -> int | None:
        """None: hold this one back (it is counted). Else log it, with the number held back since the last."""
        entry = self._keys.get(key)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return None
        held = 0
        if entry is not None:
            held = int(entry[1])
            del self._keys[key]  # re-inserted last: the dict stays oldest admitted first
        elif len(self._keys) >= self.max_keys:
            self._forget(now)
        self._keys[key] = [now, 0]
        return held

    def _forget(self, now: float) -> None:
        stale = [key for key, (admitted, _) in self._keys.items() if now - admitted >= self.interval]
        if not stale:  # all recent: the oldest half goes (the dict is oldest admitted first)
            stale = list(self._keys)[: len(self._keys) // 2 or 1]
        for key in stale:
            del self._keys[key]


__all__ = ["WARNING_INTERVAL", "LogLimit"]
