"""Acknowledgement batches (runtime.caller.acks): ids ride on the next SUBMIT, or go alone after ACK_DELAY_S; none is
lost or sent twice, whichever thread adds them. Pure: a fake sender and asyncio's own loop."""

from __future__ import annotations

import asyncio
import threading

from runtime.caller import acks
from runtime.caller.acks import AckBatch


def _batch(on_loop: bool) -> tuple[AckBatch, list[list[bytes]]]:
    sent: list[list[bytes]] = []
    return AckBatch(on_loop_thread=lambda: on_loop, send_alone=sent.append), sent


def test_a_submit_takes_the_batch_and_the_next_one_starts_empty() -> None:
    batch, sent = _batch(on_loop=False)
    batch.add(b"1")
    batch.add(b"2")
    assert batch.take() == [b"1", b"2"] and batch.take() == []
    batch.flush()
    assert sent == []  # nothing left to send alone


def test_ids_added_off_the_loop_wait_for_a_submit_or_a_heartbeats_flush() -> None:
    batch, sent = _batch(on_loop=False)
    batch.add(b"1")  # no loop on this thread: no timer may be set
    batch.flush()
    batch.flush()
    assert sent == [[b"1"]]


def test_on_the_loop_a_timer_sends_the_batch_alone_once_when_no_submit_came() -> None:
    async def main() -> list[list[bytes]]:
        batch, sent = _batch(on_loop=True)
        for call_id in (b"1", b"2", b"3"):
            batch.add(call_id)
        assert sent == []
        await asyncio.sleep(acks.ACK_DELAY_S * 3)
        return sent

    assert asyncio.run(main()) == [[b"1", b"2", b"3"]]


def test_the_timer_sends_nothing_when_a_submit_carried_the_ids() -> None:
    async def main() -> tuple[list[bytes], list[list[bytes]]]:
        batch, sent = _batch(on_loop=True)
        batch.add(b"1")
        carried = batch.take()
        await asyncio.sleep(acks.ACK_DELAY_S * 3)
        return carried, sent

    assert asyncio.run(main()) == ([b"1"], [])


def test_ids_from_many_threads_are_each_sent_exactly_once() -> None:
    batch, sent = _batch(on_loop=False)
    taken: list[bytes] = []
    per_thread = 2000

    def add(thread: int) -> None:
        for n in range(per_thread):
            batch.add(b"%d-%d" % (thread, n))

    threads = [threading.Thread(target=add, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        taken += batch.take()  # SUBMITs taking batches meanwhile
    for thread in threads:
        thread.join()
    batch.flush()
    every = taken + [call_id for ids in sent for call_id in ids]
    assert len(every) == 4 * per_thread and len(set(every)) == len(every)
