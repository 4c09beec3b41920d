"""The work queue of one chunk and the worker threads that drain it.

Files wait in a queue; a file to retry waits in a heap until its backoff
ends; `running` counts files handed out and not yet finished or handed back,
which is how the chunk knows it is done. The number of workers may change
while the chunk runs (Multi-Chunk moves channels between chunks): a worker
too many leaves at its next file boundary.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator


class Schedule:
    """Queue, retry heap and worker count of one chunk. Every method takes the lock itself."""

    def __init__(
        self,
        indices: Iterable[int],
        workers: int,
        stopping: Callable[[], bool],
        transfers_idle: Callable[[], None] = lambda: None,
    ) -> None:
        """`stopping`: take no new file (a fall-back moves the rest elsewhere). `transfers_idle`:
        called when every file left is waiting for its verdict (sequential verification starts)."""
        self.queue: deque[int] = deque(indices)
        self.delayed: list[tuple[float, int]] = []  # (ready time, index), a heap
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.running = 0
        self.in_verify: set[int] = set()
        self.fatal: BaseException | None = None  # no worker can ever connect (auth, host key)
        self.stopping, self.transfers_idle = stopping, transfers_idle
        self.wanted, self.live = workers, 0
        self.threads: list[threading.Thread] = []
        self.started = self.ended = self.stopped = False
        self._target: Callable[[], None] = lambda: None

    # -- files ---------------------------------------------------------------
    def _promote(self) -> None:
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            self.queue.append(heapq.heappop(self.delayed)[1])

    def pop(self, want: Callable[[int], bool] | None = None, carrying: int = 0) -> int | None:
        """Next ready file (with `want`, only one it accepts). None: nothing ready now, or
        (`carrying` files already on this worker) fewer files left than the other workers could
        take one each. Without that rule one worker's pipeline (pp 2) took both files of wan50's
        `large` while the second connection sat idle: one window-bound connection, 274 against
        392 Mbit/s (benchmarks/results/wan50-openssh)."""
        with self.lock:
            self._promote()
            if not self.queue or (carrying and len(self.queue) < self.wanted) or self.stopping():
                return None
            if want is not None and not want(self.queue[0]):
                return None
            self.running += 1
            return self.queue.popleft()

    def pop_group(
        self, limit: int, want: Callable[[int], bool], weight: Callable[[int], int], max_weight: int
    ) -> list[int]:
        """The files pop(want) would hand out one call at a time, up to `limit` of them and
        until their weights reach `max_weight`, under one lock (a bundle takes hundreds)."""
        out: list[int] = []
        total = 0
        with self.lock:
            self._promote()
            queue = self.queue
            while len(out) < limit and total < max_weight and queue and not self.stopping():
                if not want(queue[0]):
                    break
                i = queue.popleft()
                self.running += 1
                out.append(i)
                total += weight(i)
        return out

    def share(self) -> int:
        """Files waiting per worker (rounded up): what one worker may take at once and still
        leave the others as much."""
        with self.lock:
            return -(-len(self.queue) // max(1, self.wanted))

    def each(self) -> Iterator[int]:
        """Files for one worker, one at a time, until none is ready or it is one too many."""
        while not self.surplus():
            i = self.pop()
            if i is None:
                return
            yield i

    def has_ready(self, want: Callable[[int], bool] | None = None) -> bool:
        """A file is ready (with `want`: the next in line is one it accepts, as pop would take)."""
        with self.lock:
            self._promote()
            return bool(self.queue) and not self.stopping() and (want is None or want(self.queue[0]))

    def wait_for_work(self) -> bool:
        """Block until a file is ready (or this worker is one too many); False when the chunk
        has nothing left to do."""
        with self.lock:
            while True:
                if self.stopping():
                    return False  # a fall-back takes the rest elsewhere; files in flight still finish
                self._promote()
                if self.queue or self.live > self.wanted:
                    return True
                if not self.delayed and self.running == 0:
                    return False
                if not self.delayed and self.running == len(self.in_verify):
                    self.transfers_idle()
                if self.fatal is not None:
                    return False
                timeout = (self.delayed[0][0] - time.monotonic()) if self.delayed else 0.5
                self.wake.wait(max(0.01, min(timeout, 0.5)))

    def settle(self, record: Callable[[], None] | None = None, files: int = 1) -> None:
        """`files` handed-out files are finished (`record` stores their outcomes under the lock),
        or handed back for another protocol to carry."""
        with self.lock:
            if record is not None:
                record()
            self.running -= files
            self._wake_if_idle()

    def later(self, i: int, delay: float) -> None:
        """Retry file i after `delay` seconds."""
        with self.lock:
            heapq.heappush(self.delayed, (time.monotonic() + delay, i))
            self.running -= 1
            self.wake.notify_all()

    def give_back(self, i: int) -> None:
        """File i was not started after all: first in line again."""
        with self.lock:
            self.queue.appendleft(i)
            self.running -= 1
            self.wake.notify_all()

    def verifying(self, i: int, waiting: bool) -> None:
        with self.lock:
            if waiting:
                self.in_verify.add(i)
            else:
                self.in_verify.discard(i)
            self._wake_if_idle()

    def _wake_if_idle(self) -> None:
        """Wake the waiting workers when what they wait on may have changed (lock held): no file
        left running, or every running one waiting for its checksum. Not on every file: a group
        of 1,000 small files settles at once, and waking every idle worker for each one cost
        more CPU than moving the files (100,000 wake-ups for 20,000 files)."""
        if self.running == 0 or self.running == len(self.in_verify):
            self.wake.notify_all()

    def fail_all(self, exc: BaseException) -> None:
        with self.lock:
            self.fatal = exc
            self.wake.notify_all()

    def take_left(self) -> list[int]:
        """Every file not handed out (queued or waiting to retry), now counted as running
        (`settle` ends each)."""
        with self.lock:
            left = list(self.queue) + [i for _, i in self.delayed]
            self.queue.clear()
            self.delayed.clear()
            self.running += len(left)
            return left

    def wait_idle(self, give_up: Callable[[float], bool]) -> None:
        """Wait until no file is running; `give_up(seconds nothing moved)` ends the wait early."""
        with self.lock:
            last, still_since = self.running, time.monotonic()
            while self.running > 0:
                self.wake.wait(0.5)
                if self.running != last:
                    last, still_since = self.running, time.monotonic()
                elif give_up(time.monotonic() - still_since) and not any(th.is_alive() for th in self.threads):
                    self.running = 0
                    return

    # -- workers ---------------------------------------------------------------
    def start(self, target: Callable[[], None]) -> bool:
        """Start the workers on `target`; False when there is nothing to do."""
        with self.lock:
            if not self.queue:
                self.ended = True
                return False
            self._target = target
            self.wanted = min(self.wanted, len(self.queue))
            self.started = True
            self._spawn()
            return True

    def set_workers(self, n: int) -> None:
        """Grow to `n` workers now, or shrink: a worker too many leaves once the files it has
        in flight are done."""
        with self.lock:
            self.wanted = n
            if self.started and not self.ended:
                self._spawn()
            self.wake.notify_all()

    def stop(self) -> None:
        """Every worker leaves at its next file boundary; files not started stay not done."""
        with self.lock:
            self.stopped = True
        self.set_workers(0)

    def _spawn(self) -> None:
        while self.live < self.wanted:  # lock held
            th = threading.Thread(target=self._target, name=f"transfer-cc{len(self.threads)}", daemon=True)
            self.threads.append(th)
            self.live += 1
            th.start()

    def surplus(self) -> bool:
        with self.lock:
            return self.live > self.wanted

    def retire(self, gone: list[bool]) -> bool:
        """At a file boundary: leave if the chunk has a worker too many."""
        with self.lock:
            if self.live > self.wanted:
                self.live -= 1
                gone[0] = True
                self.wake.notify_all()
        return gone[0]

    def worker_left(self, gone: list[bool]) -> None:
        with self.lock:
            if not gone[0]:
                self.live -= 1
            self.wake.notify_all()

    def join(self) -> None:
        """Until every worker, including any set_workers added meanwhile, has left."""
        while True:
            with self.lock:
                alive = [th for th in self.threads if th.is_alive()]
                if not alive:
                    self.ended = True
                    return
            for th in alive:
                th.join()
