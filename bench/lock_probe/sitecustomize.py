"""Loaded by every Python process `bench/sqlite_locks.py` starts (this folder is first on PYTHONPATH):
when `MAILQUEUE_LOCK_PROBE` names a folder, time how long each SQLite write transaction of this process
holds the write lock, and write the times there as JSON at exit. Nothing is changed but the timing."""

import os

if os.environ.get("MAILQUEUE_LOCK_PROBE"):
    from bench.sqlite_locks import install_probe

    install_probe(os.environ["MAILQUEUE_LOCK_PROBE"])
