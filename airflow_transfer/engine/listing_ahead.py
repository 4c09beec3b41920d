"""A copy's source listing, started with its first SSH handshakes.

The listing of a remote tree is one exec of the stdlib lister (remote/lister.py): the server
walks the tree while this side waits. Run by the copy itself, it starts only after the copy's
imports (pyarrow, SQLAlchemy, the engine: about 0.3 s of this process's CPU) and the store;
started from the command line as soon as a connection is up, the server walks while this
process imports (100,000 files on loopback: the lister takes about 0.55 s).

Kept free of the manifest and its libraries, so that the command line can load it before them.
The listing is handed over through the pool (`expect` / `stash` / `take`), like the bundle
helpers started ahead (bundle_channel.py); manifest.list_remote takes it, or runs the lister
itself when none was started or it was started for another root.

An upload's tree is walked here (`LocalWalk`), once, in a thread of its own: the head start
reads its records as they come, the manifest takes them all. Walked by each, 100,000 files
cost the command line about 0.25 s of CPU more (the head start had walked half of them).
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..protocols import openssh
from ..protocols.ssh import SSHTarget
from ..remote import lister

LISTER = Path(__file__).resolve().parent.parent / "remote" / "lister.py"
LISTING = "source-listing"  # the pool companion's name
LOCAL_WALK = "local-walk"  # an upload's: the walk of its local tree


def run_lister(pool: Any, root: str) -> tuple[int, bytes, bytes]:
    """The lister's exit status, output and error output for `root`, over one exec channel."""
    return pool.exec_command(_command(root), stdin=LISTER.read_bytes())


def _command(root: str) -> str:
    return f"python3 - {shlex.quote(root)}"


def run_lister_over_openssh(target: SSHTarget, root: str, idle: float = 120.0) -> tuple[int, bytes, bytes] | None:
    """run_lister, carried by an `ssh host command` process of its own (the same host key checks
    and keys as the bundle helpers'); None where `ssh` did not start or failed itself (exit
    status 255): the caller then lists over paramiko, and meets any real error there.

    Why: a download's first small files wait for the listing, and over paramiko the listing
    waits for a connection whose login runs Python steps beside the copy path's imports. On a
    loopback pull of 2,000 x 64 KiB the `ssh`-carried helpers were ready 0.40-0.50 s after the
    start and the listing over paramiko only at 0.63-0.70 s (docs/benchmarks.md, 2026-12-08)."""
    try:
        proc = openssh.OpenSSHProcess(target, _command(root))
    except (OSError, ValueError):
        return None
    try:
        out, err = _collect(proc.proc, LISTER.read_bytes(), idle)
    except BrokenPipeError:
        return None  # `ssh` ended before it took the lister: it failed itself
    finally:
        proc.close()
    status = proc.proc.returncode
    if status is None or status == 255:
        return None
    return status, out, err


def _collect(proc: subprocess.Popen, stdin: bytes, idle: float) -> tuple[bytes, bytes]:
    """Write `stdin` to the process and read its output to the end; TimeoutError after `idle`
    seconds without a byte (as a paramiko channel's timeout, run_lister's, would)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    out: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    with selectors.DefaultSelector() as sel:
        for f in (proc.stdout, proc.stderr):
            sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            ready = sel.select(idle)
            if not ready:
                proc.kill()
                raise TimeoutError(f"the source's lister sent nothing for {idle:g} s")
            for key, _ in ready:
                piece = os.read(key.fd, 1 << 20)
                if piece:
                    out[key.fd].append(piece)
                else:
                    sel.unregister(key.fileobj)
    proc.wait()
    return b"".join(out[proc.stdout.fileno()]), b"".join(out[proc.stderr.fileno()])


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


def listing_ahead(pool: Any, root: str, over_openssh: bool = False) -> tuple[Ahead, threading.Thread]:
    """list_ahead, and the listing itself, which others may read (wait on its `ready`) while
    the copy has not taken it yet (the head start, head_start.py); with `over_openssh`, over
    an `ssh` process first (run_lister_over_openssh)."""
    pool.expect(LISTING, 1)
    ahead = Ahead(root)

    def run() -> None:
        try:
            got = run_lister_over_openssh(pool.target, root) if over_openssh else None
            ahead.result = got if got is not None else run_lister(pool, root)
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


class LocalWalk:
    """The records of a local tree (remote/lister.py's, without the JSON), walked in a thread of
    its own: `follow` reads them as they come, `records` waits for all of them."""

    NOTIFY_EVERY = 256  # records appended between two wake-ups of a follower

    def __init__(self, root: str) -> None:
        self.root = root
        self._records: list[list] = []
        self._error: BaseException | None = None
        self._done = False
        self._closed = False
        self._grown = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="local-walk", daemon=True)

    def start(self) -> LocalWalk:
        self.thread.start()
        return self

    def _run(self) -> None:
        recs = self._records
        try:
            for rec in lister.records(self.root):
                if self._closed:
                    break
                recs.append(rec)
                if len(recs) % self.NOTIFY_EVERY == 0:
                    with self._grown:
                        self._grown.notify_all()
        except Exception as exc:  # noqa: BLE001 - raised again where the records are taken
            self._error = exc
        with self._grown:
            self._done = True
            self._grown.notify_all()

    def follow(self, stop: threading.Event) -> Iterator[list]:
        """The records in walk order as they are found, until the walk ends or `stop` is set."""
        recs, i = self._records, 0
        while not stop.is_set():
            done = self._done  # read before the length: a walk done now has every record in
            n = len(recs)
            while i < n:
                yield recs[i]
                i += 1
            if done or self._error is not None:
                return
            with self._grown:
                if not self._done and len(recs) <= i:
                    self._grown.wait(0.05)

    def records(self) -> list[list]:
        """Every record, once the walk is done; what stopped it, raised again."""
        self.thread.join()
        if self._error is not None:
            raise self._error
        if self._closed:
            raise RuntimeError("the walk was stopped before it ended")
        return self._records

    def close(self) -> None:
        """Stop walking (the pool closes with the copy, or without it)."""
        self._closed = True


def walk_ahead(pool: Any, root: str) -> LocalWalk:
    """Start walking the local tree at `root` for an upload over `pool`; `take_walk` hands it over."""
    walk = LocalWalk(root).start()
    pool.expect(LOCAL_WALK, 1)
    pool.stash(LOCAL_WALK, walk)
    return walk


def take_walk(pool: Any, root: str) -> LocalWalk | None:
    """The walk started ahead for `root`, or None when none was or it walks another root."""
    take = getattr(pool, "take", None)
    walk = take(LOCAL_WALK) if take is not None else None
    if walk is None or walk.root != root:
        return None
    return walk
