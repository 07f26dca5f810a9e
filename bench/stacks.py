"""Summarise py-spy's folded stacks (`--format raw`): where the samples go, by function, phase and package."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")

#: (name, test on a shortened file path), first match wins; applied to the leaf frame
PACKAGES: list[tuple[str, tuple[str, ...]]] = [
    ("django_mailqueue", ("django_mailqueue/",)),
    ("aiosmtplib", ("aiosmtplib/",)),
    ("psycopg", ("psycopg/", "psycopg_binary/", "psycopg_pool/")),
    ("redis-py", ("redis/",)),
    ("django.db (ORM, sqlite3 calls)", ("django/db/",)),
    ("django (other)", ("django/",)),
    ("dnspython", ("dns/",)),
    ("asyncio event loop", ("asyncio/", "selectors.py")),
    ("threads / futures", ("threading.py", "concurrent/", "queue.py")),
    ("email (stdlib)", ("email/",)),
    ("ssl / socket", ("ssl.py", "socket.py")),
    ("logging", ("logging/",)),
    ("uuid / datetime / json", ("uuid.py", "datetime.py", "json/", "_strptime.py")),
]


@dataclass
class Frame:
    func: str
    file: str

    @property
    def key(self) -> str:
        return f"{self.func} ({self.file})"


def shorten(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/lib/python3.12/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def parse(lines: Iterable[str]) -> list[tuple[list[Frame], int]]:
    out = []
    for raw in lines:
        raw = raw.rstrip("\n")
        if not raw:
            continue
        stack_text, _, count = raw.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        frames = []
        for part in stack_text.split(";"):
            m = _FRAME.match(part.strip())
            if m:
                frames.append(Frame(m.group("func"), shorten(m.group("file"))))
            else:
                frames.append(Frame(part.strip(), "?"))
        out.append((frames, n))
    return out


def package_of(file: str) -> str:
    for name, marks in PACKAGES:
        if any(m in file for m in marks):
            return name
    if file.startswith("<") or "/" not in file:
        return "interpreter / builtins"
    return "other"


#: frames that every sample of a thread passes through: left out of the inclusive table
TRAMPOLINES = (
    "<frozen runpy>",
    "threading.py",
    "concurrent/futures/thread.py",
    "django/__main__.py",
    "django/core/management/__init__.py",
    "django/core/management/base.py",
    "asyncio/runners.py",
)


def startup(frames: list[Frame]) -> bool:
    """Importing modules or `django.setup()`: the process starting, not delivering."""
    return any(
        f.file.startswith("<frozen importlib") or (f.func == "setup" and f.file == "django/__init__.py") for f in frames
    )


def phase_of(frames: list[Frame]) -> str:
    """The deepest django_mailqueue function on the stack (what our code was doing), or what ran instead."""
    if startup(frames):
        return "(start-up: imports, django.setup())"
    for frame in reversed(frames):
        if frame.file.startswith("django_mailqueue/"):
            module = frame.file.removesuffix(".py").replace("/", ".")
            return f"{module}.{frame.func}"
    leaf = frames[-1] if frames else Frame("?", "?")
    return f"(outside django_mailqueue: {package_of(leaf.file)})"


def summarise(text: str, *, title: str, ms_per_msg: float | None, basis: str = "CPU", top: int = 30) -> str:
    stacks = parse(text.splitlines())
    total = sum(n for _, n in stacks) or 1
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    for frames, n in stacks:
        if not frames:
            continue
        own[frames[-1].key] += n
        for key in {f.key for f in frames if not f.file.startswith(TRAMPOLINES)}:
            incl[key] += n
        phases[phase_of(frames)] += n
        packages["(start-up: imports, django.setup())" if startup(frames) else package_of(frames[-1].file)] += n

    def table(counter: Counter[str], heading: str, limit: int) -> list[str]:
        rows = [f"{heading}", "", "| share | ms/msg | where |", "| ---: | ---: | --- |"]
        for key, n in counter.most_common(limit):
            share = n / total
            per = f"{share * ms_per_msg:.3f}" if ms_per_msg is not None else "—"
            rows.append(f"| {100 * share:5.1f}% | {per} | `{key}` |")
        return [*rows, ""]

    note = f"{total} samples."
    if ms_per_msg is not None:
        note += f" {basis} time per message: {ms_per_msg:.3f} ms; `ms/msg` spreads it by share."
    lines = [f"# {title}", "", note, ""]
    lines += table(packages, "## By package of the running (leaf) frame", 20)
    lines += table(phases, "## By the deepest django_mailqueue function on the stack", top)
    lines += table(incl, "## Inclusive, by function", top + 10)
    lines += table(own, "## Self, by function", top)
    return "\n".join(lines)


def main() -> None:
    """`python -m bench.stacks FOLDED [MS_PER_MSG]`: print the summary of one folded-stacks file."""
    import sys

    path = sys.argv[1]
    per = float(sys.argv[2]) if len(sys.argv) > 2 else None
    with open(path) as f:
        print(summarise(f.read(), title=path, ms_per_msg=per))


if __name__ == "__main__":
    main()
