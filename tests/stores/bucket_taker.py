"""A process that takes tokens from one bucket until it is empty: `python -m tests.stores.bucket_taker KEY WANT`.

Started by tests/stores/test_shaping_processes.py with the store in MAILQUEUE_TEST_MAILQUEUE (as a test's
worker is, tests/settings.py). It says "ready", waits for a line on stdin (so the takers start together),
takes WANT tokens a call at one fixed time (the bucket never refills), and prints how many it got.
"""

from __future__ import annotations

import sys


def main() -> None:
    import django

    django.setup()
    from django_mailqueue.core.clock import from_micros
    from django_mailqueue.stores import get_store

    key, want = sys.argv[1], int(sys.argv[2])
    store = get_store()
    now = from_micros(1_900_000_000_000_000)
    store.take_tokens("warm-up", rate=1, burst=1, want=0, now=now)  # connected before the start
    print("ready", flush=True)
    sys.stdin.readline()
    got = 0
    while taken := store.take_tokens(key, rate=0.001, burst=BURST, want=want, now=now):
        got += taken
    print(got, flush=True)


#: The bucket's size, the same in every taker.
BURST = 600

if __name__ == "__main__":
    main()
