"""Asking one destination for the digests of a batch of blocks, in rounds.

Each checksum thread has its own destination (connection and helper). Its helper pipelines a
batch's requests on one long-lived channel; where there is no helper, the blocks are read back
(or, with only a coreutils command there, checked as whole files at the end). A dead channel
is reopened with backoff and the batch asked again, a bounded number of rounds.
"""

from __future__ import annotations

from collections.abc import Callable

from ..integrity.remote import DigestRequest
from .block_book import Asked, BlockAnswer
from .block_threads import ThreadBalance
from .verify_channel import is_channel_error, reconnect
from .verify_digests import DestinationDigests
from .verify_items import Piece, VerifyItem

HELPER_WINDOW = 64  # requests in flight on the helper channel


def open_destination(dest: DestinationDigests) -> None:
    """Opens `dest`'s connection and helper (raising what opening raises)."""
    dest.start()
    dest.start_error = None
    if dest.where == "helper":
        dest.helper.window = HELPER_WINDOW


class BlockDigests:
    """One destination's digests of blocks, for one checksum thread."""

    def __init__(
        self,
        dest: DestinationDigests,
        algorithm: str,
        max_rounds: int,
        time_left: Callable[[], float],
        sleep_or_stop: Callable[[float], bool],
        balance: ThreadBalance,
    ) -> None:
        self.dest = dest
        self.algorithm = algorithm
        self.max_rounds = max_rounds
        self.time_left = time_left
        self.sleep_or_stop = sleep_or_stop
        self.balance = balance

    def ask(self, batch: list[Asked]) -> list[BlockAnswer]:
        """(digest, length read or None) or an exception, per block, from the destination's disk.

        A dead channel is reopened and the batch asked again, at most `max_rounds` times: a server
        that breaks the channel on every attempt ends in an error for these blocks, not a loop."""
        rounds = 0
        while True:
            if self.dest.start_error is not None:
                out: list[BlockAnswer] = [self.dest.start_error] * len(batch)
                rounds += 1
                if rounds > self.max_rounds or not self._reconnect():
                    return out
            try:
                out = self._once(batch)
            except Exception as exc:  # noqa: BLE001 - the channel died
                out = [exc] * len(batch)
            if not any(isinstance(r, BaseException) and is_channel_error(r) for r in out):
                return out
            rounds += 1
            if rounds > self.max_rounds or not self._reconnect():
                return out

    def _once(self, batch: list[Asked]) -> list[BlockAnswer]:
        dest = self.dest
        if dest.where == "coreutils":
            # Whole files only: the file is checked as one block when it is complete.
            return [(b.digest, None) for f, b in batch]
        if dest.where != "helper":
            items = [VerifyItem(f.index, f.task.tmp, [Piece(b.offset, b.length, b.digest)]) for f, b in batch]
            return [r if isinstance(r, BaseException) else (r[0], None) for r in dest.digests(items)]
        # The block that ends the file is read to the end of the file, so a longer copy shows.
        ends = [b.offset + b.length == f.task.size for f, b in batch]
        reqs = [
            DigestRequest(f.task.tmp, self.algorithm, b.offset, None if last else b.length)
            for (f, b), last in zip(batch, ends)
        ]
        out: list[BlockAnswer] = []
        for last, r in zip(ends, dest.helper.digest_many(reqs)):
            if isinstance(r, BaseException):
                out.append(r)
                continue
            self.balance.checked(r.seconds, r.digests.length)  # c as the helper measured it
            out.append((r.digest, r.digests.length if last else None))
        return out

    def _reconnect(self) -> bool:
        def reopen() -> None:
            self.dest.close()
            open_destination(self.dest)

        return reconnect(reopen, self.time_left, self.sleep_or_stop)
