"""One bundle helper's stream, seen from this side: starting it (over a carrier from
bundle_carriers.py), framing puts, gets and commits, and reading its replies.

Kept apart from the mover (bundle.py) so that it loads without the engine, the store and
their libraries: a download's helpers can then be started while those still load
(`start_download_helpers`, called by the command line with its first SSH handshakes).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import math
import os
import select
import shlex
import threading
import zlib
from collections.abc import Callable
from importlib import resources
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..protocols import openssh
from .bundle_carriers import BundleUnavailable, forget, local_exec, openssh_exec, paramiko_exec
from .sftp_jobs import count_progress_many

if TYPE_CHECKING:
    from .sftp_jobs import FileTask

GROUP_FILES = 1024  # files per commit (and so per syncfs); the sink may allow fewer (its fd limit)
# AIRFLOW_TRANSFER_BUNDLE_CARRIER=openssh|paramiko forces one carrier both ways: how the rule
# in BundleMover._open was measured, and a way out should one misbehave somewhere.
CARRIER_ENV = "AIRFLOW_TRANSFER_BUNDLE_CARRIER"
# What the sink verifies with (its hashlib digests; "none": no verification): a copy verified
# otherwise sends its small files over SFTP, so no helper is started ahead for it.
# One encoder for every request line: json.dumps with separators builds a new one per call,
# and a put is encoded once per file.
_json = json.JSONEncoder(separators=(",", ":")).encode
_quote = encode_basestring_ascii
BUNDLE_ALGORITHMS = ("md5", "sha1", "sha256", "blake2b", "none")
COMMIT_TIMEOUT = 300.0  # a group's fsync and read-back on a slow disk
# The helper's source travels compressed (zlib is part of every CPython build): 46 KB of
# source is 15 KB, which a new connection's first congestion window carries at once, where
# the plain text took two or three round trips of TCP slow start before the helper could start.
BOOTSTRAP = "import sys,zlib;exec(zlib.decompress(sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))))"
# The helper on this host runs from its own file (argv[1] is its directory), so that Python loads
# the bytecode compiled when the package was installed: compiling the source at each start cost
# 11 ms of CPU per helper, and a copy of small files starts two or three. The server's helper is
# sent its source: its Python may be another version.
LOCAL_BOOTSTRAP = "import sys;sys.path.insert(0,sys.argv[1]);import bundle_sink;sys.exit(bundle_sink.main())"
SINK_NAME = "airflow-transfer-bundle"
LANDER_NAME = "airflow-transfer-bundle-lander"  # the same helper on this host, landing downloads
FEEDER_NAME = "airflow-transfer-bundle-feeder"  # the same helper on this host, reading uploads


SINK_PYTHON = "python3"  # the interpreter the bundle helper runs under, found on the server's PATH


def sink_command(python: str = SINK_PYTHON) -> str:
    # -I: ignore PYTHON* variables and the user's site directory on the remote.
    return f"{shlex.quote(python)} -I -c {shlex.quote(BOOTSTRAP)}"


@functools.lru_cache(maxsize=1)
def sink_preamble() -> bytes:
    """What BOOTSTRAP reads: the length of the compressed source, a newline, and the source."""
    source = zlib.compress(resources.files("airflow_transfer.remote").joinpath("bundle_sink.py").read_bytes(), 9)
    return b"%d\n" % len(source) + source


@functools.lru_cache(maxsize=1)
def _local_helper_dir() -> str | None:
    """The directory of the helper's file, where it is a file (not inside a zip archive)."""
    path = resources.files("airflow_transfer.remote").joinpath("bundle_sink.py")
    return os.path.dirname(os.fspath(path)) if isinstance(path, os.PathLike) and os.path.isfile(path) else None


def _start_local(hello: bytes) -> Any:
    folder = _local_helper_dir()
    if folder is None:
        return local_exec(BOOTSTRAP, sink_preamble() + hello)
    return local_exec(LOCAL_BOOTSTRAP, hello, (folder,))


class ChannelReader:
    """Lines and exact byte counts from a channel, in large reads: paramiko's file wrapper moves
    its whole buffer on every small read, which is quadratic in the size of a group's reply."""

    READ_SIZE = 4 << 20

    def __init__(self, recv: Any) -> None:
        self.recv, self.buf, self.pos = recv, bytearray(), 0

    def _fill(self) -> bool:
        data = self.recv(self.READ_SIZE)
        if not data:
            return False
        del self.buf[: self.pos]  # what is left unread is less than one file or line
        self.pos = 0
        self.buf += data
        return True

    def readline(self) -> bytes:
        """The next line with its newline; what is left (maybe b"") at EOF."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos : end + 1])
                self.pos = end + 1
                return line
            if not self._fill():
                line = bytes(self.buf[self.pos :])
                self.pos = len(self.buf)
                return line

    def unread(self) -> bytes:
        """What was received and not yet read, handed over (to a Pump) and forgotten here."""
        data = bytes(self.buf[self.pos :])
        self.buf, self.pos = bytearray(), 0
        return data


class SinkChannel:
    """One running bundle sink on one SSH connection."""

    def __init__(self, start: Callable[[bytes], Any], carrier: str = "paramiko") -> None:
        """Starts the sink with `start`, which runs the helper over a carrier of bundle_carriers.py
        (sink_command() with sink_preamble() ahead of the bytes it is given, or the helper's own
        file on this host) and writes the hello request it is given as the command's first input."""
        self.carrier = carrier
        self.next_id = 1
        hello_id = self._id()
        # The source and the hello go with the command: no round trip waits between them.
        self.chan = start(_json({"op": "hello", "id": hello_id}).encode("ascii") + b"\n")
        self.out = ChannelReader(self.chan.recv)
        self.in_flight = 0  # groups begun and not yet answered: the channel is reusable at 0 only
        # The helper reading the files and the one landing them (pair()): closed together.
        self.partner: SinkChannel | None = None
        self.pump: Pump | None = None
        self.received: tuple[Any, Any] = (None, None)  # the last commit's bytes and seconds, as it counted them
        self.owed: list[int] = []  # replies to read before the next commit's (the relay's)
        self.root: str | None = None  # the only tree this helper may place files in (confine)
        self.key: bytes | None = None  # the key of the macs that let it place a file (confine)
        self.dirs: dict[str, str] = {}  # local directories made absolute (absolute_in)
        try:
            hello = self._reply(hello_id)
        except (OSError, EOFError, ValueError) as exc:
            why = self._why_not(exc)
            self.close()
            raise BundleUnavailable(why) from exc
        if hello.get("helper") != SINK_NAME:
            self.close()
            raise BundleUnavailable(f"the server answered the bundle sink with something else: {str(hello)[:120]}")
        self.algorithms = set(hello.get("algorithms") or ())
        self.max_files = max(1, min(GROUP_FILES, int(hello.get("max_pending") or GROUP_FILES)))
        self.durability = str(hello.get("durability") or "")
        self.chan.settimeout(COMMIT_TIMEOUT)
        forget(self.chan)

    @classmethod
    def over_paramiko(cls, transport: Any) -> SinkChannel:
        return cls(lambda hello: paramiko_exec(transport, sink_command(), sink_preamble() + hello), "paramiko")

    @classmethod
    def over_openssh(cls, target: Any) -> SinkChannel:
        return cls(lambda hello: openssh_exec(target, sink_command(), sink_preamble() + hello), "openssh")

    @classmethod
    def local(cls) -> SinkChannel:
        """The helper on this host, under this interpreter: downloads land through it."""
        return cls(_start_local, "local")

    def _why_not(self, exc: BaseException) -> str:
        """Why the sink did not answer: no python3 (the shell says 127), or a server that runs
        no command of ours at all (SFTP only: a forced command answers in its own protocol)."""
        try:
            if self.chan.exit_status_ready() and self.chan.recv_exit_status() == 127:
                return "python3 is not installed on the destination"
        except Exception:  # noqa: BLE001 - the channel is gone: the reason below still holds
            pass
        return (
            f"the server runs no command of ours over SSH exec (SFTP only, or a forced command): {exc or 'no answer'}"
        )

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _request(self, req: dict) -> dict:
        req["id"] = self._id()
        self.chan.sendall(_json(req).encode("ascii") + b"\n")
        return self._reply(req["id"])

    def _reply(self, want: int) -> dict:
        line = self.out.readline()
        if not line:
            raise EOFError("the bundle sink closed its channel")
        reply = json.loads(line)
        if reply.get("id") != want:
            raise ValueError(f"the bundle sink answered request {reply.get('id')} instead of {want}")
        return reply

    def pair(self, dest: SinkChannel, root: str | None = None) -> None:
        """Make this helper (the one reading the files) feed `dest` (the one landing them): from
        here on what this one writes goes to dest's input through a Pump, and its replies come
        back among dest's. A download pairs the source's helper with the lander on this host;
        an upload, a helper on this host (the feeder) with the server's sink.

        Why: the files' bytes then go from helper to helper without being read, framed and
        copied by this process, whose per-file Python steps and interpreter lock were the
        bound on streams of small files.

        With `root` (a download: dest is the lander, fed by the server's helper), dest is first
        told to refuse any file outside it, and to name each file it placed in its replies: the
        server's output must not be able to write elsewhere on this host."""
        if self.partner is dest:
            if dest.root != root:
                raise ValueError(f"the bundle helpers are paired for {dest.root}, not {root}")
            return
        if self.partner is not None or dest.partner is not None:
            raise ValueError("a bundle helper is already paired with another")
        if root is not None:
            key = os.urandom(32)
            # Before anything is fed to it: the server's output cannot unsay it.
            confined = dest._request({"op": "confine", "root": root, "key": key.hex()})
            if not confined.get("ok"):
                raise ValueError(f"the lander refused its root {root}: {str(confined)[:200]}")
            dest.root, dest.key = root, key
        for chan in (self.chan, dest.chan):
            if isinstance(chan, openssh.PipeChannel):
                chan.reader_elsewhere = True  # the pump reads this one's output; this process, dest's
        self.partner, dest.partner = dest, self
        self.pump = Pump(self, dest)
        relay_id = self._id()
        self.chan.sendall(_json({"op": "relay", "id": relay_id}).encode("ascii") + b"\n")
        dest.owed.append(relay_id)  # read with the first commit's reply: no round trip of its own

    def relay(
        self, tasks: list[FileTask], algorithm: str | None, upload: bool, stats: Any = None
    ) -> tuple[list[int], int]:
        """Ask this helper to send a group of files to its partner, and the partner to commit it;
        the request ids of the files and of the commit (read with the partner's result())."""
        dest = self.partner
        if dest is None:
            raise ValueError("relay needs a helper paired with this one")
        algo = _json(algorithm)
        ids = [self._id() for _ in tasks]
        local = absolute_in(self.dirs)
        if upload:  # read here, placed on the server as named
            lines = [send_line(i, local(t.src), t, algo, t.tmp, t.dst) for i, t in zip(ids, tasks)]
        else:
            lines = [send_line(i, t.src, t, algo, local(t.tmp), local(t.dst), dest.key) for i, t in zip(ids, tasks)]
        commit_id = self._id()
        commit = {"op": "commit", "id": commit_id, "fsync": True, "drop_cache": True, "brief": True}
        lines.append(_json({"op": "emit", "id": self._id(), "line": commit}).encode("ascii") + b"\n")
        self.in_flight += 1
        dest.in_flight += 1
        if self.pump is not None:
            self.pump.expect(tasks, stats)
        self.chan.sendall(memoryview(b"".join(lines)))
        return ids, commit_id

    def answered(self) -> None:
        """A group's commit is answered (this helper's, or its partner's for a group it fed)."""
        self.in_flight -= 1

    def result(self, commit_id: int, count: int) -> list[dict]:
        """The reply to a commit asked for with relay(): one entry per file of its group, in order."""
        while self.owed:
            owed = self._reply(self.owed.pop(0))
            if not owed.get("ok"):
                raise ValueError(f"the bundle helper refused to feed its partner: {str(owed)[:200]}")
        reply = self._reply(commit_id)
        self.answered()
        self.received = (reply.get("bytes"), reply.get("seconds"))
        files = reply.get("files")
        if not reply.get("ok") or not isinstance(files, list) or len(files) != count:
            raise ValueError(f"the bundle sink refused the commit: {str(reply)[:200]}")
        # Asked for brief: a placed file is its id alone, any other entry an object.
        return [{"id": f, "ok": True} if type(f) is int else f for f in files]

    def close(self) -> None:
        partner, self.partner = self.partner, None
        if partner is not None:
            partner.partner = None
        if self.pump is not None:
            self.pump.stopped = True
        try:
            self.chan.close()
        except Exception:  # noqa: BLE001 - closing a channel that may be gone already
            pass
        if partner is not None:
            partner.close()  # one helper of a pair without the other is no use


class Pump:
    """Copies the output of the helper reading the files into the input of the one landing
    them, in a thread of its own, without parsing it: a few system calls per megabyte, whatever
    the files' sizes. It counts each file as progress once about that many bytes went through
    (so that progress, and the rate the tuning watches, move as a group travels)."""

    READ_SIZE = 1 << 20
    FRAME_BYTES = 128  # less than a put's header: a file counts a little early, never late

    def __init__(self, source: SinkChannel, dest: SinkChannel) -> None:
        self.source, self.dest = source, dest
        self.stopped = False
        self._lock = threading.Lock()
        self._waiting: collections.deque[FileTask] = collections.deque()  # asked for, not yet counted
        self._stats: Any = None
        self._through = 0  # bytes forwarded beyond those of the files counted
        self.thread = threading.Thread(target=self._run, name="bundle-pump", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            left = self.source.out.unread()
            if left:
                self.forward(left)
            pipes = _pipes(self.source.chan, self.dest.chan)
            if pipes is not None:
                self._splice(*pipes)
                return
            while not self.stopped:
                try:
                    data = self.source.chan.recv(self.READ_SIZE)
                except TimeoutError:
                    continue  # a pair kept for the next chunk is idle meanwhile
                if not data:
                    break
                self.forward(data)
        except Exception:  # noqa: BLE001 - the end of dest's input tells the client
            pass
        finally:
            # dest answers the commits it read and exits: the client hears of a source
            # that went away as an end of file, not after the commit timeout.
            end = getattr(self.dest.chan, "shutdown_write", None)
            try:
                if end is not None:
                    end()
            except Exception:  # noqa: BLE001 - dest's channel is gone already: nothing to end
                pass

    def _splice(self, src: int, dst: int) -> None:
        """Move the bytes from pipe to pipe inside the kernel (both helpers run under `ssh` or
        on this host): no read into this process, no write out of it, no buffer to allocate.

        Why: a download's every byte went through here twice (read, then written) in 1 MiB
        objects made and freed each time; on 2,000 x 64 KiB pulled over loopback that was a
        tenth of this process's CPU (docs/transfers.md, "The pump")."""
        timeout = self.source.chan.gettimeout()
        while not self.stopped:
            try:
                moved = os.splice(src, dst, self.READ_SIZE)
            except BlockingIOError:
                # Nothing to read or no room to write: wait for bytes, then for room (at once
                # where there is). A pair kept for the next chunk waits here while it is idle.
                if select.select([src], [], [], timeout)[0]:
                    select.select([], [dst], [], timeout)
                continue
            if moved == 0:
                break  # the source's end of file
            self._count(moved)

    def expect(self, tasks: list[FileTask], stats: Any) -> None:
        """The files of a group just asked for, in the order their bytes will come."""
        with self._lock:
            self._waiting.extend(tasks)
            self._stats = stats

    def forget(self) -> None:
        """Drop the files still waiting to be counted: every group sent was answered, so their
        bytes went through; the next group's owner counts its own from zero."""
        with self._lock:
            self._waiting.clear()
            self._through = 0
            self._stats = None

    def forward(self, data: bytes) -> None:
        # A view: paramiko's sendall re-slices what is left after every packet, which for a
        # bytes object copies it (quadratic in the size sent).
        self.dest.chan.sendall(memoryview(data))
        self._count(len(data))

    def _count(self, moved: int) -> None:
        through: list[tuple[FileTask, int]] = []
        with self._lock:
            self._through += moved
            while self._waiting and self._waiting[0].size + self.FRAME_BYTES <= self._through:
                t = self._waiting.popleft()
                self._through -= t.size + self.FRAME_BYTES
                through.append((t, t.size))
            stats = self._stats
        if through:
            count_progress_many(through, stats)


def _pipes(source: Any, dest: Any) -> tuple[int, int] | None:
    """The pipe ends a Pump may splice between: the source helper's output and the landing
    helper's input, when both run as processes here (ssh, or the helper itself) and the
    source's channel holds nothing it read already; else None (a paramiko channel)."""
    if not hasattr(os, "splice"):
        return None
    if not (isinstance(source, openssh.PipeChannel) and isinstance(dest, openssh.PipeChannel)):
        return None
    if source.buffered():
        return None  # bytes read early would then come after those spliced past them
    return source.read_fd, dest.write_fd


def absolute_in(dirs: dict[str, str]) -> Callable[[str], str]:
    """os.path.abspath for the local paths of a group's files, their directories' looked up in
    `dirs` and made absolute once: a group's files share a few directories, and abspath's
    normalisation was most of this process's per-file path work."""

    def absolute(path: str) -> str:
        head, _, name = path.rpartition("/")
        if not head.strip("/") or name in ("", ".", ".."):
            return os.path.abspath(path)  # at the top of a tree, or a name abspath would fold
        base = dirs.get(head)
        if base is None:
            if len(dirs) >= _DIRS_KEPT:
                dirs.clear()
            base = dirs[head] = os.path.abspath(head)
        return f"{base}{name}" if base.endswith("/") else f"{base}/{name}"  # "/" and "//" end so

    return absolute


_DIRS_KEPT = 4096  # directories absolute_in remembers per helper (a tree of millions has many)


def put_mac(key: bytes, request_id: int, tmp: str, dst: str) -> str:
    """The mac a confined lander checks on a put (remote/bundle_sink.py, confine)."""
    asked = f"{request_id}\0{tmp}\0{dst}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(asked, key=key, digest_size=32).hexdigest()


def send_line(request_id: int, src: str, t: FileTask, algo: str, tmp: str, dst: str, key: bytes | None = None) -> bytes:
    """A send request for the helper reading the file at `src`, as _json would write it: the
    file's listed size, mtime and mode, where its partner is to put it and, with `key`, the mac
    that lets a confined lander put it there. Formatted directly, since it is written once per
    file (a third of the time of building and encoding the dict); the strings go through json's
    own escaping."""
    mtime = float(t.mtime)
    mtime_text = float.__repr__(mtime) if math.isfinite(mtime) else _json(mtime)
    mac = f',"mac":"{put_mac(key, request_id, tmp, dst)}"' if key is not None else ""
    return (
        f'{{"op":"send","id":{request_id:d},"path":{_quote(src)},"size":{t.size:d},"mtime":{mtime_text},'
        f'"mode":{t.mode & 0o7777:d},"algo":{algo},"tmp":{_quote(tmp)},"dst":{_quote(dst)}{mac}}}\n'
    ).encode("ascii")


def wants_openssh() -> bool:
    """Whether a helper goes over OpenSSH's client (where it can carry the target): in both
    directions (BundleMover._open says why), unless CARRIER_ENV forces paramiko."""
    return os.environ.get(CARRIER_ENV, "") != "paramiko"


def start_download_helpers(pool: Any, count: int) -> int:
    """Start `count` pairs of download helpers (the source's, over OpenSSH's client, and the
    lander on this host) in the background, kept on `pool` for the bundle mover; how many.

    Why: an `ssh` login and two interpreters take about 0.25 s on loopback, which a chunk
    otherwise spends waiting at its start, after the imports and the listing. Started with
    the copy's first handshakes, they are ready by then. None is started where the mover
    would not use OpenSSH's client; one that fails leaves its reason for the mover to report."""
    return _start_pairs(pool, count, upload=False)


def start_upload_helpers(pool: Any, count: int) -> int:
    """start_download_helpers for an upload: the server's sink over OpenSSH's client and a
    feeder on this host, where uploads ride OpenSSH (wants_openssh); how many pairs."""
    return _start_pairs(pool, count, upload=True)


def _start_pairs(pool: Any, count: int, upload: bool) -> int:
    if count <= 0 or not _openssh_carries(pool, upload):
        return 0
    # The helper here starts beside the server's, not after it: the server's login takes most
    # of a second on a 50 ms path, a local interpreter 0.05 s, and the chunk needs both.
    _start_ahead(
        pool,
        count,
        [
            (SINK_NAME, lambda: SinkChannel.over_openssh(pool.target)),
            (FEEDER_NAME if upload else LANDER_NAME, SinkChannel.local),
        ],
    )
    return count


def openssh_may_carry(pool: Any) -> bool:
    """Whether OpenSSH's client can carry a helper to the pool's server at all (for an upload,
    before the round trip decides: carrier_choice.py)."""
    return wants_openssh() and not openssh.usable(dataclasses.replace(pool.target, client="auto"))


def _openssh_carries(pool: Any, upload: bool) -> bool:
    """Whether the mover would carry the server's helper over OpenSSH's client; for an upload,
    as the pool's round trip decided it, where it was decided."""
    if upload and getattr(pool, "upload_carrier_why", None):
        return False
    return openssh_may_carry(pool)


def _start_ahead(pool: Any, count: int, starters: list[tuple[str, Callable[[], SinkChannel]]]) -> None:
    """`count` of each helper in `starters` (name, how to start one), each in a thread of its
    own, stashed on `pool` under its name as it is ready (or its reason for not starting)."""
    for name, _ in starters:
        pool.expect(name, count)
    for _ in range(count):
        for name, start in starters:
            threading.Thread(target=_start_one, args=(pool, name, start), name="bundle-warm", daemon=True).start()


def _start_one(pool: Any, name: str, start: Callable[[], SinkChannel]) -> None:
    pool.stash(name, _started(start))


def _started(start: Callable[[], SinkChannel]) -> SinkChannel | BundleUnavailable | None:
    """A helper, or why it cannot run (for the mover to report), or None after any other error
    (the mover then starts its own and meets that error itself)."""
    try:
        return start()
    except BundleUnavailable as exc:
        return exc
    except Exception:  # noqa: BLE001 - see above
        return None


class SinkStarting:
    """An upload's sink being started on one connection's own transport, ahead of the mover
    that will use it (`prestart_upload_sinks`); kept in the connection's companions meanwhile."""

    in_flight = 0  # no group was sent on it: the connection may be reused or closed freely

    def __init__(self, transport: Any) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result: SinkChannel | BundleUnavailable | None = None
        self._closed = False
        threading.Thread(target=self._run, args=(transport,), name="bundle-warm", daemon=True).start()

    def _run(self, transport: Any) -> None:
        result = _started(lambda: SinkChannel.over_paramiko(transport))
        with self._lock:
            self._result, closed = result, self._closed
        self._done.set()
        if closed and isinstance(result, SinkChannel):
            result.close()  # the connection closed while the sink was starting

    def result(self) -> SinkChannel | None:
        """The sink once started; None after an unexpected error (the mover then starts its own
        and meets it); raises the BundleUnavailable it met, as starting one now would."""
        self._done.wait()
        if isinstance(self._result, BundleUnavailable):
            raise self._result
        return self._result

    def close(self) -> None:
        with self._lock:
            self._closed, result = True, self._result
        if isinstance(result, SinkChannel):
            result.close()


def prestart_upload_sinks(pool: Any, count: int) -> int:
    """Start an upload's sink on each of the next `count` connections the pool opens ahead,
    as soon as its login is done (while its SFTP session opens), and as many feeders (the
    helper on this host that reads the files for a sink); how many sinks it will start.

    Why: the exec channel, python3's start and the hello cost a chunk's worker about 0.25 s
    at 50 ms RTT before its first group, after the imports and the listing. Started with the
    connection, the sink is ready by then. Only where the mover would carry an upload's sink
    over paramiko, and only on paramiko connections: an OpenSSH-carried one would open a
    second login for it."""
    if count <= 0 or _openssh_carries(pool, upload=True):
        return 0
    _start_ahead(pool, count, [(FEEDER_NAME, SinkChannel.local)])  # a local interpreter each, 0.05 s: at once
    left = count
    lock = threading.Lock()

    def start(transport: Any) -> dict[str, Any]:
        nonlocal left
        with lock:
            if left <= 0:
                return {}
            left -= 1
        return {SINK_NAME: SinkStarting(transport)}

    pool.on_transport = start
    return count


def take_spare(pool: Any, name: str) -> SinkChannel | None:
    """A helper started ahead under `name` (waiting for one still starting), or None; raises
    the BundleUnavailable it met instead, as starting one now would."""
    spare = pool.take(name)
    if isinstance(spare, BundleUnavailable):
        raise spare
    return spare
