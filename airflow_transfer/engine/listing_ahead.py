"""A download's source listing, started with the copy's first SSH handshakes.

The listing of a remote tree is one exec of the stdlib lister (remote/lister.py): the server
walks the tree while this side waits. Run by the copy itself, it starts only after the copy's
imports (pyarrow, SQLAlchemy, the engine: about 0.3 s of this process's CPU) and the store;
started from the command line as soon as a connection is up, the server walks while this
process imports (100,000 files on loopback: the lister takes about 0.55 s).

Kept free of the manifest and its libraries, so that the command line can load it before them.
The listing is handed over through the pool (`expect` / `stash` / `take`), like the bundle
helpers started ahead (bundle_channel.py); manifest.list_remote takes it, or runs the lister
itself when none was started or it was started for another root.
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import Any

LISTER = Path(__file__).resolve().parent.parent / "remote" / "lister.py"
LISTING = "source-listing"  # the pool companion's name


def run_lister(pool: Any, root: str) -> tuple[int, bytes, bytes]:
    """The lister's exit status, output and error output for `root`, over one exec channel."""
    return pool.exec_command(f"python3 - {shlex.quote(root)}", stdin=LISTER.read_bytes())


class Ahead:
    """A listing run ahead: its result, or the error it met (raised again where it is taken)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.result: tuple[int, bytes, bytes] | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()  # set once result or error is

    def get(self) -> tuple[int, bytes, bytes]:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def close(self) -> None:
        """Nothing to release: the channel closed when the lister ended (the pool calls this)."""


def list_ahead(pool: Any, root: str) -> threading.Thread:
    """Start listing `root` over `pool` in the background; `take_ahead` hands the result over."""
    return listing_ahead(pool, root)[1]


def listing_ahead(pool: Any, root: str) -> tuple[Ahead, threading.Thread]:
    """list_ahead, and the listing itself, which others may read (wait on its `ready`) while
    the copy has not taken it yet (the head start, head_start.py)."""
    pool.expect(LISTING, 1)
    ahead = Ahead(root)

    def run() -> None:
        try:
            ahead.result = run_lister(pool, root)
        except Exception as exc:  # noqa: BLE001 - raised again by whoever takes the listing
            ahead.error = exc
        ahead.ready.set()
        pool.stash(LISTING, ahead)

    thread = threading.Thread(target=run, name="list-ahead", daemon=True)
    thread.start()
    return ahead, thread


def take_ahead(pool: Any, root: str) -> Ahead | None:
    """The listing started ahead for `root` (waiting for it if it is still running), or None
    when none was started or it lists another root."""
    take = getattr(pool, "take", None)
    ahead = take(LISTING) if take is not None else None
    if ahead is None or ahead.root != root:
        return None
    return ahead
