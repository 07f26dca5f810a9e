"""Traffic shaping: `MAILQUEUE["SHAPING"]` and a relay's limits parsed, and the decisions on them, without I/O.

Which limits apply to a destination (its shaping key), whether a reply
suspends it and for how long, and whether a run of unreachable attempts
makes it dead are pure functions here; the worker acts on them
(`worker/shaper.py`). The why of each default: docs/shaping.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .core.items import Reply
from .core.shaping import Window
from .validation import InvalidValueError, keyed
from .validation import number as _number

#: The periods a RATE may name, in seconds.
RATE_PERIODS = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: The share of a RATE's count that may go at once (the token bucket's size, rounded down, at least one):
#: "50/s" sends at most 52 in any second — what the relay counts is when each message reaches it, so the
#: rest of a 10% margin is left for the time between taking a token and the end of the message's data
#: (a first connection's set-up, a worker's pause) — and "50000/d" 2,500 at once, the rest spread over the day.
BURST_FRACTION = 0.05
#: A worker asks the store for the tokens of at most this many seconds of the rate at once (at least one).
BATCH_SECONDS = 0.05
#: A destination's connection limit, per worker process, when SHAPING does not set one: half the
#: worker's slots, at most this many.
DEFAULT_CONNECTIONS = 10
#: Messages one connection to an MX host carries before it is closed and a new one opened.
DEFAULT_MESSAGES_PER_CONNECTION = 100
#: Seconds a destination is first suspended, and the most its doubling reaches.
DEFAULT_SUSPEND = 60.0
DEFAULT_SUSPEND_MAX = 3600.0
#: Consecutive attempts in which no server of a destination could be reached before it is dead.
DEFAULT_DEAD_AFTER = 5

#: The keys of one SHAPING entry.
ENTRY_KEYS = (
    "RATE",
    "CONNECTIONS",
    "MESSAGES_PER_CONNECTION",
    "RULES",
    "DEFAULT_RULES",
    "SUSPEND",
    "SUSPEND_MAX",
    "DEAD_AFTER",
)
#: The shaping keys a relay route takes in its dict.
RELAY_LIMIT_KEYS = ("RATE", "CONNECTIONS", "MESSAGES_PER_CONNECTION")

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|min|h|d)\s*$")


@dataclass(frozen=True)
class Rate:
    """A RATE: `count` messages per `period` seconds, across every worker of the store."""

    count: int
    period: float

    @property
    def per_second(self) -> float:
        return self.count / self.period

    @property
    def burst(self) -> int:
        """The token bucket's size: how many may go at once after a quiet spell."""
        return max(1, math.floor(self.count * BURST_FRACTION))

    @property
    def batch(self) -> int:
        """Tokens a worker asks the store for in one round trip."""
        return max(1, min(self.burst, math.ceil(self.per_second * BATCH_SECONDS)))

    def window(self, lease: float) -> Window:
        """The closed-loop window the workers' takes keep (docs/shaping.md, "The window"): the count plus a tenth;
        a token in flight is forgotten after three periods (at least a minute), at most a lease."""
        expire = min(lease, max(3 * self.period, 60.0))
        return Window(self.count + self.count // 10, round(self.period * 1e6), round(expire * 1e6))

    def __str__(self) -> str:
        unit = next(name for name, seconds in RATE_PERIODS.items() if seconds == self.period)
        return f"{self.count}/{unit}"


def parse_rate(value: Any) -> Rate:
    """ "14/s", "300/min", "10000/h", "50000/d" as a `Rate`."""
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise InvalidValueError(
            f'RATE must be a count above 0 per "s", "min", "h" or "d", such as "14/s" or "10000/h", not {value!r}'
        )
    return Rate(int(match.group(1)), RATE_PERIODS[match.group(2)])


@dataclass(frozen=True)
class Limits:
    """The limits on one destination; None: no limit."""

    rate: Rate | None = None
    #: sessions at once, per worker process
    connections: int | None = None
    #: messages one connection carries before it is closed
    messages_per_connection: int | None = None


@dataclass(frozen=True)
class ThrottleRule:
    """A reply that suspends its destination: `pattern` searched in the reply ("421 4.7.0 text"), `seconds` the
    first suspension (doubling while it keeps happening, up to SUSPEND_MAX)."""

    pattern: re.Pattern[str]
    seconds: float

    def matches(self, reply: Reply) -> bool:
        """Only a server's temporary (4xx) reply: a permanent one fails its recipients whatever it says."""
        code = reply.code
        return code is not None and 400 <= code < 500 and self.pattern.search(str(reply)) is not None


def _rule(pattern: str, seconds: float) -> ThrottleRule:
    return ThrottleRule(re.compile(pattern, re.IGNORECASE), seconds)


#: The big providers' documented throttling replies (any 421 suspends as well, for SUSPEND seconds).
DEFAULT_RULES: tuple[ThrottleRule, ...] = (
    # Gmail: "421 4.7.28 ... unusual rate of unsolicited mail" ("421 4.7.0 Try again later" is any 421)
    _rule(r"\b4\.7\.28\b", 600),
    # Yahoo: "421 4.7.0 [TSS04] Messages ... temporarily deferred due to unexpected volume or user complaints"
    _rule(r"\[TSS?0\d\]", 900),
    # Outlook.com / Microsoft 365: "451 4.7.650 The mail server [...] has been temporarily rate limited"
    _rule(r"\b4\.7\.650\b", 900),
    _rule(r"\b4\.7\.500\b.*server busy", 300),
    # Microsoft 365 SMTP submission: "4.5.127 Message submission rate for this client has exceeded"
    _rule(r"\b4\.5\.127\b|submission rate .* exceeded", 60),
    # Microsoft 365 SMTP submission, over 3 connections: "432 4.3.2 STOREDRV.ClientSubmit; sender thread limit exceeded"
    _rule(r"sender thread limit exceeded", 60),
    # Amazon SES: "454 Throttling failure: Maximum sending rate exceeded" / "Daily message quota exceeded"
    _rule(r"throttling failure: daily message quota exceeded", 3600),
    _rule(r"throttling failure: maximum sending rate exceeded", 5),
)


@dataclass(frozen=True)
class DestinationPolicy:
    """What applies to one destination: its shaping key (shared by every destination it covers), limits,
    throttling rules, suspension and dead-destination settings."""

    #: a recipient domain, a ".suffix" (MX rollup) or "relay:host:port"
    key: str
    limits: Limits
    rules: tuple[ThrottleRule, ...] = DEFAULT_RULES
    suspend: float = DEFAULT_SUSPEND
    suspend_max: float = DEFAULT_SUSPEND_MAX
    dead_after: int = DEFAULT_DEAD_AFTER


@dataclass(frozen=True)
class ShapingEntry:
    """One SHAPING entry as written; None: as "*" says, else the default."""

    rate: Rate | None = None
    connections: int | None = None
    messages_per_connection: int | None = None
    rules: tuple[ThrottleRule, ...] | None = None
    default_rules: bool | None = None
    suspend: float | None = None
    suspend_max: float | None = None
    dead_after: int | None = None


@dataclass(frozen=True)
class Shaping:
    """`MAILQUEUE["SHAPING"]`: entries by recipient domain, ".suffix" or "*"."""

    entries: Mapping[str, ShapingEntry] = field(default_factory=dict)

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The ".suffix" keys, the longest first (the most specific wins)."""
        return tuple(sorted((k for k in self.entries if k.startswith(".")), key=len, reverse=True))

    def known_key(self, domain: str) -> str | None:
        """The shaping key of an MX destination when its MX hosts do not matter (its own entry, or no
        ".suffix" entry at all); None when only its MX hosts can tell."""
        if domain in self.entries or not self.suffixes:
            return domain
        return None

    def mx_policy(self, domain: str, mx_hosts: Sequence[str], *, concurrency: int) -> DestinationPolicy:
        """The policy of an MX destination: its own entry; else the longest ".suffix" every MX host name is
        under (MX rollup: one key for all the domains that site hosts); else "*", keyed by the domain."""
        key = domain
        if domain not in self.entries:
            hosts = [h.lower().rstrip(".") for h in mx_hosts] or [domain]
            for suffix in self.suffixes:
                if all(h.endswith(suffix) for h in hosts):
                    key = suffix
                    break
        entry = self.entries.get(key, ShapingEntry())
        return self._policy(key, entry, mx=True, concurrency=concurrency)

    def relay_policy(self, host: str, port: int, limits: Limits) -> DestinationPolicy:
        """The policy of a relay route: its own limits, and "*"'s rules and suspension settings."""
        return self._policy(relay_key(host, port), ShapingEntry(), mx=False, concurrency=0, limits=limits)

    def _policy(
        self, key: str, entry: ShapingEntry, *, mx: bool, concurrency: int, limits: Limits | None = None
    ) -> DestinationPolicy:
        star = self.entries.get("*", ShapingEntry())

        def pick(name: str) -> Any:
            own = getattr(entry, name)
            return own if own is not None else getattr(star, name)

        if limits is None:
            connections = pick("connections")
            if connections is None:
                connections = max(1, min(DEFAULT_CONNECTIONS, math.ceil(concurrency / 2)))
            per_connection = pick("messages_per_connection")
            limits = Limits(
                rate=pick("rate"),
                connections=connections,
                messages_per_connection=per_connection
                if per_connection is not None
                else DEFAULT_MESSAGES_PER_CONNECTION,
            )
        own_rules = tuple(entry.rules or ()) + tuple(star.rules or ())
        default_rules = pick("default_rules")
        rules = own_rules + (DEFAULT_RULES if default_rules is None or default_rules else ())
        suspend, suspend_max, dead_after = pick("suspend"), pick("suspend_max"), pick("dead_after")
        return DestinationPolicy(
            key=key,
            limits=limits,
            rules=rules,
            suspend=DEFAULT_SUSPEND if suspend is None else suspend,
            suspend_max=DEFAULT_SUSPEND_MAX if suspend_max is None else suspend_max,
            dead_after=DEFAULT_DEAD_AFTER if dead_after is None else dead_after,
        )


def relay_key(host: str, port: int) -> str:
    """The shaping key of a relay: every route through it shares its limits."""
    return f"relay:{host.lower()}:{port}"


# --- the decisions ------------------------------------------------------------------


def suspends(reply: Reply, policy: DestinationPolicy) -> float | None:
    """Seconds of a first suspension when `reply` (a server's) suspends its destination: the first rule
    that matches (your own before the defaults), else any 421 for SUSPEND; None when it does not."""
    code = reply.code
    if code is None or not 400 <= code < 500:
        return None  # only a server's temporary reply suspends (`ThrottleRule.matches`): most replies, no rule asked
    for rule in policy.rules:
        if rule.matches(reply):
            return rule.seconds
    if code == 421:
        return policy.suspend
    return None


def suspension_seconds(first: float, strikes: int, cap: float) -> float:
    """How long suspension number `strikes` in a row lasts: `first`, doubled for each strike before, at most `cap`."""
    return float(min(cap, first * 2 ** min(max(strikes, 1) - 1, 32)))


def is_dead(unreachable_in_a_row: int, policy: DestinationPolicy) -> bool:
    """A destination is dead after DEAD_AFTER attempts in a row reached none of its servers — or after a
    whole cohort (as many as its connection limit) did, whichever comes first."""
    cohort = policy.limits.connections or policy.dead_after
    return unreachable_in_a_row >= max(1, min(policy.dead_after, cohort))


def probe_seconds(connect: float, greeting: float) -> float:
    """How long a destination's probe (slow start) may take to be accepted or refused: the connect, greeting and
    EHLO timeouts. The store's probe is held no longer than a lease (`worker.probing.probe_hold`)."""
    return connect + 2 * greeting


# --- parsing ------------------------------------------------------------------------


def _count(name: str, value: Any) -> int:
    try:
        result: int = _number(integer=True, minimum=1, exclusive=False, maximum=1_000_000)(value)
    except InvalidValueError as exc:
        raise InvalidValueError(f"{name} {exc}") from None
    return result


def _seconds(name: str, value: Any) -> float:
    try:
        return float(_number(maximum=30 * 86400)(value))
    except InvalidValueError as exc:
        raise InvalidValueError(f"{name} {exc}") from None


def parse_limits(value: Mapping[str, Any]) -> Limits:
    """RATE, CONNECTIONS and MESSAGES_PER_CONNECTION of a relay dict or a SHAPING entry."""
    return Limits(
        rate=parse_rate(value["RATE"]) if value.get("RATE") is not None else None,
        connections=_count("CONNECTIONS", value["CONNECTIONS"]) if value.get("CONNECTIONS") is not None else None,
        messages_per_connection=(
            _count("MESSAGES_PER_CONNECTION", value["MESSAGES_PER_CONNECTION"])
            if value.get("MESSAGES_PER_CONNECTION") is not None
            else None
        ),
    )


def _rules(value: Any) -> tuple[ThrottleRule, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise InvalidValueError('RULES must be a list of {"MATCH": regular expression, "SUSPEND": seconds}')
    rules = []
    for rule in value:
        if not isinstance(rule, Mapping) or set(rule) != {"MATCH", "SUSPEND"}:
            raise InvalidValueError(
                f'each rule must be {{"MATCH": regular expression, "SUSPEND": seconds}}, not {rule!r}'
            )
        if not isinstance(rule["MATCH"], str) or not rule["MATCH"]:
            raise InvalidValueError(f"a rule's MATCH must be a regular expression, not {rule['MATCH']!r}")
        try:
            pattern = re.compile(rule["MATCH"], re.IGNORECASE)
        except re.error as exc:
            raise InvalidValueError(f"the rule MATCH {rule['MATCH']!r} is not a regular expression: {exc}") from None
        rules.append(ThrottleRule(pattern, _seconds("a rule's SUSPEND", rule["SUSPEND"])))
    return tuple(rules)


def _entry(value: Any) -> ShapingEntry:
    value = keyed(value, ENTRY_KEYS, f"any of {list(ENTRY_KEYS)}")
    limits = parse_limits(value)
    default_rules = value.get("DEFAULT_RULES")
    if default_rules is not None and not isinstance(default_rules, bool):
        raise InvalidValueError("DEFAULT_RULES must be True or False")
    suspend = _seconds("SUSPEND", value["SUSPEND"]) if value.get("SUSPEND") is not None else None
    suspend_max = _seconds("SUSPEND_MAX", value["SUSPEND_MAX"]) if value.get("SUSPEND_MAX") is not None else None
    if suspend is not None and suspend_max is not None and suspend_max < suspend:
        raise InvalidValueError("SUSPEND_MAX must be at least SUSPEND")
    return ShapingEntry(
        rate=limits.rate,
        connections=limits.connections,
        messages_per_connection=limits.messages_per_connection,
        rules=_rules(value["RULES"]) if value.get("RULES") is not None else None,
        default_rules=default_rules,
        suspend=suspend,
        suspend_max=suspend_max,
        dead_after=_count("DEAD_AFTER", value["DEAD_AFTER"]) if value.get("DEAD_AFTER") is not None else None,
    )


def _shaping_key(name: str) -> str:
    if name == "*":
        return name
    try:
        label = name.lower().strip(".").encode("idna").decode("ascii")
    except UnicodeError:
        raise InvalidValueError(f"{name!r} is not a domain or a .suffix") from None
    return "." + label if name.startswith(".") else label


def parse_shaping(value: Any) -> Shaping:
    """`SHAPING` as a `Shaping`: keys lowercased, in A-label form; "." keys are MX host suffixes."""
    if value is None:
        return Shaping()
    if not isinstance(value, Mapping):
        raise InvalidValueError('must be a dict of recipient domain, ".suffix" or "*" -> limits')
    entries: dict[str, ShapingEntry] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name.strip("."):
            raise InvalidValueError(f'keys must be recipient domains, ".suffix"es or "*", not {name!r}')
        key = _shaping_key(name)
        try:
            entries[key] = _entry(entry)
        except InvalidValueError as exc:
            raise InvalidValueError(f"[{name!r}] {exc}") from None
    merged = entries.get("*", ShapingEntry())
    cap = merged.suspend_max if merged.suspend_max is not None else DEFAULT_SUSPEND_MAX
    for name, entry in entries.items():
        suspend = entry.suspend if entry.suspend is not None else merged.suspend
        suspend_max = entry.suspend_max if entry.suspend_max is not None else cap
        if suspend is not None and suspend > suspend_max:
            raise InvalidValueError(f"[{name!r}] SUSPEND {suspend:g} is above SUSPEND_MAX {suspend_max:g}")
    return Shaping(entries)


__all__ = [
    "DEFAULT_RULES",
    "DestinationPolicy",
    "Limits",
    "Rate",
    "Shaping",
    "ShapingEntry",
    "ThrottleRule",
    "is_dead",
    "probe_seconds",
    "parse_limits",
    "parse_rate",
    "parse_shaping",
    "relay_key",
    "suspends",
    "suspension_seconds",
]
