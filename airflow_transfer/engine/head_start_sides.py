"""The two directions of the head start (head_start.py): where a download's and an upload's
first small files come from, how their destination is looked at, and which helpers carry them."""

from __future__ import annotations

import json
import os
import posixpath
import stat
from collections.abc import Iterator
from typing import Any

from .bundle_carriers import BundleUnavailable
from .bundle_channel import FEEDER_NAME, LANDER_NAME, SINK_NAME, SinkChannel, take_spare
from .head_start import HeadStart, small_task
from .listing_ahead import Ahead, LocalWalk, walk_ahead
from .sftp_jobs import FileTask


def _spare_pair(head: HeadStart, local_name: str) -> tuple[SinkChannel, SinkChannel] | None:
    """(the server's helper, the one on this host named `local_name`) of those started ahead,
    or None: then the chunk starts its own, and meets whatever stopped them itself."""
    try:
        server = take_spare(head.pool, SINK_NAME)
    except BundleUnavailable:
        return None
    if server is None:
        return None
    try:
        local = take_spare(head.pool, local_name)
    except BundleUnavailable:
        local = None
    if local is None or (head.algorithm is not None and head.algorithm not in server.algorithms):
        _give(head.pool, SINK_NAME, server)
        if local is not None:
            _give(head.pool, local_name, local)
        return None
    return server, local


def _give_pair(pool: Any, server: SinkChannel, local: SinkChannel, local_name: str) -> None:
    """Hand a pair back as spares: paired, the server's helper carries its partner along
    (BundleMover._pair takes it from there); unpaired, each goes back under its own name."""
    _give(pool, SINK_NAME, server)
    if server.partner is None:
        _give(pool, local_name, local)


def _give(pool: Any, name: str, helper: SinkChannel) -> None:
    pool.expect(name, 1)  # so that a `take` meanwhile waits for it rather than start its own
    pool.stash(name, helper)


class DownloadHeadStart(HeadStart):
    """The source's listing (run ahead) and the pairs of download helpers started ahead: in
    each, the server's helper reads and the lander on this host places, confined to the
    destination root."""

    def __init__(self, pool: Any, listing: Ahead, dst_root: str, algorithm: str | None, pairs: int = 1) -> None:
        super().__init__(pool, dst_root, algorithm, pairs)
        self.listing = listing
        self.root = os.path.abspath(dst_root)
        self._folders: dict[str, bool] = {}  # destination directory -> usable (a real directory)

    def _take_pair(self) -> tuple[SinkChannel, SinkChannel] | None:
        return _spare_pair(self, LANDER_NAME)

    def _give_back(self, source: SinkChannel, dest: SinkChannel) -> None:
        _give_pair(self.pool, source, dest, LANDER_NAME)

    def _small_files(self) -> Iterator[FileTask]:
        """The listing's files this may move, parsed as they are needed: a large listing's
        last lines are never read here if the copy begins first."""
        while not self.listing.ready.wait(0.05):
            if self._stop.is_set():
                return
        status, out, _ = self.listing.get()
        if status != 0 or not out.startswith(b'["r", "dir"]'):
            return  # a single file, a missing root, a forced command: the copy's own business
        src_root = self.listing.root
        for line in out.split(b"\n")[1:]:
            if self._stop.is_set():
                return
            if line.startswith(b'["f", '):
                t = small_task(json.loads(line.decode("utf-8", "surrogateescape")), src_root, self.dst_root)
                if t is not None and self._absent(t.dst):
                    yield t

    def _absent(self, dst: str) -> bool:
        """Whether nothing is at `dst` and its directory is a real directory (made if missing)."""
        folder = os.path.dirname(dst) or "."
        ok = self._folders.get(folder)
        if ok is None:
            ok = self._folders[folder] = self._real_folder(folder)
        if not ok:
            return False
        try:
            os.lstat(dst)
        except FileNotFoundError:
            return True
        return False

    def _real_folder(self, folder: str) -> bool:
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            parent = os.path.dirname(folder)
            if parent == folder or not (self._folders.get(parent) or self._real_folder(parent)):
                return False
            try:
                os.mkdir(folder)  # the copy would make it too; made here it is known to be ours
            except FileExistsError:
                return False  # made meanwhile by someone else: not looked into further
            self._folders[folder] = True
            return True
        return stat.S_ISDIR(st.st_mode)


class UploadHeadStart(HeadStart):
    """The local tree's walk (run ahead, the manifest's too) and the pairs of upload helpers
    started ahead: in each, a feeder on this host reads and the server's sink places; the server's
    directories are looked at (and made) over the SFTP session of one warmed connection, held
    meanwhile."""

    def __init__(self, pool: Any, walk: LocalWalk, dst_root: str, algorithm: str | None, pairs: int = 1) -> None:
        super().__init__(pool, dst_root, algorithm, pairs)
        self.walk, self.src_root = walk, walk.root
        self._conn: Any = None
        self._names: dict[str, set[str] | None] = {}  # remote directory -> its names (None: not usable)
        self._heads: dict[str, set[str] | None] = {}  # a destination's text up to its last "/" -> the same

    def _take_pair(self) -> tuple[SinkChannel, SinkChannel] | None:
        pair = self._take_another()
        if pair is not None:
            self._conn = self.pool.acquire()  # its SFTP session looks at the server's directories
        return pair

    def _take_another(self) -> tuple[SinkChannel, SinkChannel] | None:
        pair = _spare_pair(self, FEEDER_NAME)
        if pair is None:
            return None
        sink, feeder = pair
        return feeder, sink

    def _give_back(self, source: SinkChannel, dest: SinkChannel) -> None:
        _give_pair(self.pool, dest, source, FEEDER_NAME)

    def _done(self) -> None:
        self._release()  # every pair's thread has ended: nothing walks the server any more

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.pool.release(conn)

    def _small_files(self) -> Iterator[FileTask]:
        records = self.walk.follow(self._stop)
        if next(records, None) != ["r", "dir"]:
            return
        wanted: list[FileTask] = []
        for rec in records:
            if self._stop.is_set():
                return
            if rec[0] == "f":
                t = small_task(rec, self.src_root, self.dst_root)
                if t is not None:
                    wanted.append(t)
            if len(wanted) >= 64 or rec[0] != "f":
                yield from self._absent(wanted)
                wanted = []
        yield from self._absent(wanted)

    def _absent(self, tasks: list[FileTask]) -> Iterator[FileTask]:
        """Those of `tasks` with no entry on the server, in directories that are real ones."""
        heads = self._heads
        for t in tasks:
            cut = t.dst.rfind("/") + 1
            head = t.dst[:cut]  # a group's files share a few: looked up once each
            names = heads[head] if head in heads else heads.setdefault(head, self._folder(_dirname(head)))
            if names is not None and t.dst[cut:] not in names:
                yield t

    def _folder(self, folder: str) -> set[str] | None:
        """The names in a remote directory, making it (and its parents under the root) if
        missing; None where it is not a real directory or cannot be read."""
        if folder in self._names:
            return self._names[folder]
        wire = self._conn.wire if self._conn is not None else None
        names: set[str] | None = None
        if wire is not None:
            names = self._listed(wire, folder)
        self._names[folder] = names
        return names

    def _listed(self, wire: Any, folder: str) -> set[str] | None:
        root = self.dst_root.rstrip("/") or "/"
        try:
            if folder != root:
                up = posixpath.dirname(folder)
                parent = self._folder(up) if up != folder and folder.startswith(root) else None
                if parent is None:
                    return None
                name = posixpath.basename(folder)
                if name not in parent:
                    wire.mkdir(folder)  # the copy would make it too
                    parent.add(name)
                    return set()
            try:
                attrs = wire.stat(folder, follow=False)
            except FileNotFoundError:
                if folder != root:
                    return None  # gone since its parent was listed: not looked into further
                wire.mkdir(folder)  # the root, as the copy would make it
                return set()
            return {n for n, _ in wire.listdir_attrs(folder)} if attrs.is_dir else None
        except OSError:
            return None  # refused (permissions, a name taken meanwhile): the chunk meets the reason


def start_head_start(pool: Any, listing: Ahead, dst_root: str, algorithm: str | None, pairs: int = 1) -> HeadStart:
    """Start moving a download's first small files now over `pairs` of the helpers started
    ahead; the copy's first chunk adopts them."""
    pool.ahead = DownloadHeadStart(pool, listing, dst_root, algorithm, pairs).start()
    return pool.ahead


def _dirname(head: str) -> str:
    """posixpath.dirname of any path that begins with `head` and has no "/" after it."""
    return head.rstrip("/") or head


def start_upload_head_start(
    pool: Any, src_root: str, dst_root: str, algorithm: str | None, pairs: int = 1
) -> HeadStart:
    """Start walking an upload's tree and moving its first small files now over `pairs` of
    the helpers started ahead; the copy's manifest takes the walk, its first chunk adopts the files."""
    pool.ahead = UploadHeadStart(pool, walk_ahead(pool, src_root), dst_root, algorithm, pairs).start()
    return pool.ahead
