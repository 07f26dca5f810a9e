"""The worker's DKIM signing thread (`delivery/signing.py`): the RSA signatures asked for while it is busy go to it
together, each comes back as the field `DkimSigner` writes inline, and the published key verifies them."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import dkim
import pytest

from django_mailqueue.delivery.signing import SigningThread
from django_mailqueue.dkim import DkimEntry, DkimSigner, PendingSignature, load_key
from tests.delivery.test_dkim_signer import WHEN, message
from tests.support.dns_server import DnsServer
from tests.worker.test_dkim import MESSAGES, changed_body_byte, publish, verifies


def rsa_signer(dns_server: DnsServer, tmp_path: Path) -> DkimSigner:
    entry = publish(dns_server, tmp_path, "origin.test", "mq1", "rsa-sha256")
    key = load_key(DkimEntry("origin.test", "origin.test", "mq1", entry["PRIVATE_KEY"], "rsa-sha256"))
    return DkimSigner({"origin.test": key})


def pendings(signer: DkimSigner, count: int) -> list[tuple[bytes, PendingSignature]]:
    out = []
    for i in range(count):
        original = message(list(MESSAGES)[i % len(MESSAGES)])
        pending = signer.prepare(original)
        assert isinstance(pending, PendingSignature)
        out.append((original, pending))
    return out


def test_signatures_asked_in_one_turn_go_over_together_and_verify(dns_server: DnsServer, tmp_path: Path) -> None:
    signer = rsa_signer(dns_server, tmp_path)
    thread = SigningThread(signer)
    threads: set[str] = set()
    operation = PendingSignature.private_key_operation

    def recorded(pending: PendingSignature) -> bytes:
        threads.add(threading.current_thread().name)
        return operation(pending)

    with mock.patch.object(dkim.time, "time", return_value=WHEN):
        asked = pendings(signer, 12)

    async def main() -> list[bytes]:
        with mock.patch.object(PendingSignature, "private_key_operation", recorded):
            fields = await asyncio.gather(*(thread.sign(pending) for _, pending in asked))
        return [field + original for field, (original, _) in zip(fields, asked, strict=True)]

    try:
        signed = asyncio.run(main())
    finally:
        thread.close()
    assert thread.handovers == 1  # one per message before (`run_in_executor`)
    assert [t.startswith("mailqueue-dkim") for t in threads] == [True]
    with mock.patch.object(dkim.time, "time", return_value=WHEN):  # the inline signature: RSA's is deterministic
        assert signed == [signer.sign(original) for original, _ in asked]
    assert all(verifies(m, dns_server) for m in signed)
    assert not verifies(changed_body_byte(signed[0]), dns_server)


def test_what_is_asked_while_a_batch_is_in_the_thread_goes_next(dns_server: DnsServer, tmp_path: Path) -> None:
    signer = rsa_signer(dns_server, tmp_path)
    thread = SigningThread(signer)
    entered, release = threading.Event(), threading.Event()
    finish = signer.finish

    def held(pending: PendingSignature, signature: object) -> bytes:
        entered.set()
        release.wait(10)
        return finish(pending, signature)  # type: ignore[arg-type]

    async def main() -> tuple[list[bytes], int]:
        first, second = pendings(signer, 1), pendings(signer, 3)
        with mock.patch.object(signer, "finish", held):
            one = thread.sign(first[0][1])
            await asyncio.to_thread(entered.wait, 10)  # the first batch is in the thread
            rest = [thread.sign(pending) for _, pending in second]
            await asyncio.sleep(0)
            during = thread.handovers
            release.set()
            return await asyncio.gather(one, *rest), during

    try:
        fields, during = asyncio.run(main())
    finally:
        release.set()
        thread.close()
    assert during == 1 and thread.handovers == 2
    assert all(field.startswith(b"DKIM-Signature: v=1; a=rsa-sha256;") for field in fields)


def test_a_cancelled_request_and_a_new_event_loop_leave_the_others_signed(
    dns_server: DnsServer, tmp_path: Path
) -> None:
    signer = rsa_signer(dns_server, tmp_path)
    thread = SigningThread(signer)

    async def cancelled_then_signed() -> list[bytes]:
        asked = pendings(signer, 3)
        futures = [thread.sign(pending) for _, pending in asked]
        futures[1].cancel()
        return [await futures[0], await futures[2]]

    async def abandoned() -> None:  # its loop ends with the batch in the thread: nothing comes back to it
        thread.sign(pendings(signer, 1)[0][1])
        await asyncio.sleep(0)

    try:
        first = asyncio.run(cancelled_then_signed())
        asyncio.run(abandoned())
        again = asyncio.run(cancelled_then_signed())  # a new loop: not stuck behind the abandoned batch
    finally:
        thread.close()
    assert all(field.startswith(b"DKIM-Signature:") for field in [*first, *again])


def test_a_failed_operation_leaves_that_message_unsigned_and_the_others_signed(
    dns_server: DnsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    signer = rsa_signer(dns_server, tmp_path)
    thread = SigningThread(signer)
    operation = PendingSignature.private_key_operation
    asked = pendings(signer, 3)

    def failing(pending: PendingSignature) -> bytes:
        if pending is asked[1][1]:
            raise ValueError("no")
        return operation(pending)

    async def main() -> list[bytes]:
        with mock.patch.object(PendingSignature, "private_key_operation", failing):
            return list(await asyncio.gather(*(thread.sign(pending) for _, pending in asked)))

    try:
        fields = asyncio.run(main())
    finally:
        thread.close()
    assert [bool(field) for field in fields] == [True, False, True]
    assert "could not sign a message (ValueError)" in caplog.text


def test_a_busy_loop_hands_the_gil_to_the_thread_once_its_operation_is_over(
    dns_server: DnsServer, tmp_path: Path
) -> None:
    """The loop holds the GIL (pure Python, no system call) while the thread's OpenSSL call ends: with a switch
    interval that never expires, the thread gets the GIL back only when the loop hands it over (`_nudge`)."""
    signer = rsa_signer(dns_server, tmp_path)
    thread = SigningThread(signer)
    with mock.patch.object(dkim.time, "time", return_value=WHEN):
        ((original, pending),) = pendings(signer, 1)
    fields: list[bytes] = []
    worker = threading.Thread(target=lambda: fields.extend(thread._finish_all([pending])))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    back = kept_the_gil = False
    try:
        worker.start()
        deadline = time.perf_counter() + 10
        while thread._operation_since is None and worker.is_alive() and time.perf_counter() < deadline:
            time.sleep(0.0001)  # until the thread is in its operation (the GIL released)
        since = thread._operation_since
        # The operation ran to its end without letting this thread in: it keeps the GIL.
        kept_the_gil = since is None and not worker.is_alive()
        while (
            since is not None
            and thread._operation_since is since
            and time.perf_counter() - since <= 2 * (thread._operation_time)
        ):
            pass  # the loop's Python: the operation ends meanwhile, and the thread waits for the GIL
        for _ in range(5000 if since is not None else 0):  # each waits up to 0.5 ms for the thread
            if thread._operation_since is not since:
                break
            thread._nudge()
        back = since is not None and thread._operation_since is not since
    finally:
        sys.setswitchinterval(interval)
        worker.join(10)
    if kept_the_gil:
        pytest.skip("this cryptography's RSA operation keeps the GIL (42.0 does): there is nothing to hand over")
    assert back and thread.gil_hand_offs >= 1
    with mock.patch.object(dkim.time, "time", return_value=WHEN):
        assert fields[0] + original == signer.sign(original)
