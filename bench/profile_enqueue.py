"""cProfile of our enqueue path (run in our venv and project): batches of 100 through `send_messages`, and
single `send_mail()` calls; prints the top functions by cumulative time.

    BENCH_LIB=ours DJANGO_SETTINGS_MODULE=bench.projects.ours_settings python -m bench.profile_enqueue --count 2000
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--mode", choices=["single", "batch"], default="batch")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    django.setup()
    from bench import driver

    adapter = driver.Ours()
    msgs = [driver.make(i, args.size) for i in range(args.count)]
    # warm up: the connection, lazy imports
    if args.mode == "batch":
        adapter.batch(msgs[:100])
    else:
        adapter.one(msgs[0])
    profile = cProfile.Profile()
    profile.enable()
    if args.mode == "batch":
        for i in range(0, args.count, 100):
            adapter.batch(msgs[i : i + 100])
    else:
        for m in msgs:
            adapter.one(m)
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue().replace("/work/main/", "").replace("/root/.pyenv/versions/3.11.7/lib/python3.11/", ""))


if __name__ == "__main__":
    main()
