"""The queue's vocabulary: items and their states, errors and their codes, the clock, text rules, masking.

Pure modules with no I/O; everything else in the package builds on them.
"""
