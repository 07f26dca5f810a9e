"""Tiny Django settings modules for the benchmark: ours and each peer, configured by BENCH_* variables."""
