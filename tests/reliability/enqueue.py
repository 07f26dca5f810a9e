"""`python -m tests.reliability.enqueue START COUNT`: add the fault run's messages START..START+COUNT-1.

Run by the harness in a process of its own with `DJANGO_SETTINGS_MODULE=tests.reliability.settings`
and the run's MAILQUEUE in the environment, so it reaches the private servers through the product's own store.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.stores import get_store
    from tests.reliability.plan import new_item

    start, count = int(argv[0]), int(argv[1])
    store = get_store()
    batch = 500
    for first in range(start, start + count, batch):
        last = min(start + count, first + batch)
        store.add_many([new_item(n) for n in range(first, last)], now=SystemClock().now())
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
