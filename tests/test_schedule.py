"""The chunk's schedule (engine/schedule.py) in memory: what wakes a waiting worker."""

from __future__ import annotations

import threading

from airflow_transfer.engine.schedule import Schedule

WAIT_LIMIT = 60.0  # a hang guard only


def test_a_worker_waiting_for_work_is_woken_when_the_last_file_settles_not_for_every_file():
    """A group of small files settles file by file; a worker with nothing left to take used to
    be woken for each one (100,000 wake-ups for 20,000 files). It is woken when nothing is
    running any more, and then leaves."""
    sched = Schedule(range(1000), workers=2, stopping=lambda: False)
    taken = [sched.pop() for _ in range(1000)]
    assert None not in taken and sched.running == 1000
    waits = []
    real_wait = sched.wake.wait

    def counting_wait(timeout=None):
        waits.append(timeout)
        return real_wait(timeout)

    sched.wake.wait = counting_wait
    answer: list[bool] = []
    waiter = threading.Thread(target=lambda: answer.append(sched.wait_for_work()))
    waiter.start()
    while not waits:
        threading.Event().wait(0.001)
    for _ in range(999):
        sched.settle()
        threading.Event().wait(0.0005)  # the waiter gets the lock between files, as with real workers
    assert waiter.is_alive()  # one file still running: nothing to do, nothing to leave for
    sched.settle()
    waiter.join(WAIT_LIMIT)
    assert answer == [False]
    # One wait before the last settle, one more at most for a timeout on a loaded machine per
    # half second of settling: never one per file.
    assert len(waits) < 50, len(waits)


def test_a_worker_is_woken_when_every_running_file_waits_for_its_checksum():
    idle: list[bool] = []
    sched = Schedule(range(3), workers=2, stopping=lambda: False, transfers_idle=lambda: idle.append(True))
    for _ in range(3):
        sched.pop()
    answer: list[bool] = []
    waiter = threading.Thread(target=lambda: answer.append(sched.wait_for_work()))
    waiter.start()
    sched.settle()
    for i in (1, 2):
        sched.verifying(i, True)
    while not idle and waiter.is_alive():
        threading.Event().wait(0.001)
    assert idle  # sequential verification starts once only checksums are left
    for i in (1, 2):
        sched.verifying(i, False)
        sched.settle()
    waiter.join(WAIT_LIMIT)
    assert answer == [False]
