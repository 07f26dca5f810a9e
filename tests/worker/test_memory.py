"""The worker's malloc setting for message-sized buffers."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from django_mailqueue.worker.memory import release_large_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's mmap threshold is glibc's")
def test_on_glibc_the_threshold_is_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert ctypes.util.find_library("c")
    assert release_large_buffers() is True


def test_an_operators_own_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4194304")
    assert release_large_buffers() is False
