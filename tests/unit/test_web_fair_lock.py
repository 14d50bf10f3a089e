"""``pipeline.web.reads.FairLock``: the web child's reads take turns in the order
they asked (``threading.Lock`` wakes any waiter: the tail of the latencies)."""

from __future__ import annotations

import threading
import time

from pipeline.web.reads import FairLock


def test_the_lock_is_taken_in_the_order_it_was_asked_for() -> None:
    lock = FairLock()
    order: list[int] = []

    def take(k: int) -> None:
        with lock:
            order.append(k)

    lock.__enter__()
    threads = []
    for k in range(6):
        t = threading.Thread(target=take, args=(k,))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 10
        while len(lock._waiting) < k + 1:  # (queued before the next one asks)
            assert time.monotonic() < deadline
            time.sleep(0.001)
    lock.__exit__(None, None, None)
    for t in threads:
        t.join(timeout=10)
    assert order == list(range(6))
    with lock:  # (free again: the last one let go)
        assert not lock._waiting
