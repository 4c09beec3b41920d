"""Bundle helper: stdlib only, python3 >= 3.8, one file.

Many small files travel as ONE framed stream over one SSH exec channel, one
round trip per group of files instead of several per file: into this host
(put, commit: the sink) or out of it (get: the source). It is started as

    python3 -I -c 'import sys,zlib;exec(zlib.decompress(sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))))'

and the client writes b"<length>\\n", this source compressed with zlib (that
many bytes), then requests on the same stdin (run directly, `python3
bundle_sink.py` serves stdin at once). A request is a JSON object on one
line; replies are JSON lines, ASCII, flushed.

  {"op": "hello", "id": 1} -> helper, version, ops, algorithms, durability
      ("syncfs" or "fsync"), max_pending (the most puts one group may hold).
  {"op": "get", "id": 2, "path": "/d/f", "algo": "sha256"} -> {"id", "ok": true,
      "size", "mode", "mtime", "digest"} followed by exactly size raw bytes,
      the file as read (digest of those bytes, null with algo null); or
      {"id", "ok": false, "code", "error"} and no bytes. The path must be a
      regular file (a symlink is not followed) of at most GET_MAX bytes; a
      file that changes size while it is read answers ECHANGED. Replies come
      in request order, so a client may send a whole group of gets at once;
      they are flushed when the requests read so far are answered.
  {"op": "put", "id": 2, "tmp": "/d/.f.atpart", "path": "/d/f", "size": N,
   "mode": 420, "mtime": 1700000000.5, "algo": "sha256", "digest": hex}
      and then exactly N raw bytes; no reply. On Linux the bytes go to a file
      without a name in path's directory (O_TMPFILE), made with mode's
      permission bits (nobody else can open it); elsewhere, or where that
      filesystem or a missing /proc prevents naming such a file, to tmp,
      created anew (0o600). Then mode & 0o7777 (where it still differs) and
      mtime (as atime and mtime) are set, so the commit's flush covers them
      too. mode and mtime may be null; algo and digest are null together (no
      verification). An error is kept for the commit; all N bytes are read
      whatever happens.
  {"op": "send", "id": 2, "path": "/d/f", "size": N, "mtime": 1700000000.5,
   "mode": 420, "algo": "sha256", "tmp": "/l/.f.atpart", "dst": "/l/f"} -> a put
      request for another sink (tmp, dst as its path, the file's bytes and their
      digest), written to this helper's output: a download's source speaks to
      the helper landing the files, not to the client. A file that cannot be read,
      or whose size or mtime is not what was listed (ECHANGED), becomes {"op":
      "fail", "id", "code", "error", "source": true} instead. Reads as get does.
  {"op": "emit", "id": 3, "line": {...}} -> the object written as a line, as it
      is (the landing helper's commit, which must follow the puts in its stream).
  {"op": "relay", "id": 4} -> from here on every reply of this helper goes out
      as {"op": "echo", "reply": {...}}, which the helper reading this output
      answers with the reply as it is: the client hears both through one.
  {"op": "fail", ...} (as send writes it) -> no reply; the group's commit
      reports that file with the code given, and "source": true.
  {"op": "confine", "id": 5, "root": "/l", "key": hex} -> every later put must
      name a file under root and carry "mac", the keyed BLAKE2b (32 bytes; a key
      of 16 to 64 bytes) under key of its "<id>\0<tmp>\0<path>" (the client
      computes it and sends it with the send request, which passes it on), and
      each verified file's full entry in a commit's reply gives its path. Once
      only: the client sends it before the server's helper's output is fed to
      this one, so that output can place no file the client did not ask for,
      nor anywhere else.
  {"op": "commit", "id": 3, "fsync": true, "drop_cache": true} -> "durability"
      and "files": per put since the last commit, in order, {"id", "ok": true,
      "digest", "fsynced", "cache_dropped"} or {"id", "ok": false, "code",
      "error"}, plus "digest" and "expected" for EMISMATCH; and "bytes" and
      "seconds": what the group's puts carried, from its first request to the
      commit (how fast the group came in). With "brief": true, a placed file's
      entry is its id alone (the others' are as above): what the client needs,
      in a fraction of the bytes to write and parse.

A commit makes the group durable (one syncfs per filesystem, else an fsync per
file; "none" with fsync false), reads each file back, compares digests,
gives each verified file its final name (a hard link to the unnamed file, or
a rename of tmp; over an existing file, the unnamed one is linked at tmp and
renamed) and fsyncs each directory it named files in. A file that does not
match is removed; its final name is never touched. To read from disk, not
memory, posix_fadvise(DONTNEED) drops the flushed file's pages first, then
WILLNEED starts every file's read at once so that a group's reads queue on the
device together; the pages read back stay cached, as a written file's would
(dropping them too cost 5 % of this helper's CPU on 1 KiB files); cache_dropped
is true only for a flushed file. Limits: DONTNEED is advice;
caches below the kernel (RAID controller, drive, NFS/Lustre servers,
hypervisor) are not touched; before Linux 5.8 syncfs does not report writeback
errors (only the digest of the read-back would show them); syncfs also flushes
other writers' data on that filesystem. A crash leaves temporary names only
(files without a name vanish with the process); EOF on stdin exits 0 and
leaves pending named temporaries for the client's journal to judge.

Serving a stream, a commit's flush runs in a thread of its own while the next
group's puts are read and written; once it is done (or when there is nothing
to read), the serving thread reads the group back, names its files and
answers: the flush of one group overlaps the transfer of the next, and only
one thread runs Python per file. One commit runs at a time and replies keep
request order: any other request waits for the running commit first, and so
does a put naming a file of the committing group or one that would pass the fd
limit with it. A commit read before EOF is finished before the sink exits.

Codes: errno names, EBADREQ (malformed or unsafe request), ENOALGO, EMISMATCH,
ECHANGED (tmp was replaced by another writer before its rename, left alone; or
a got file changed size while read), EFBIG (a get over GET_MAX),
EMFILE (a put past max_pending in one group), EINTERNAL (a bug here; the sink
keeps serving). A put without a whole size >= 0 (or a line over 1 MiB) cannot
be skipped: the sink answers EBADREQ with "fatal": true and exits 2 rather
than read file data as requests.

Safety: tmp and path are absolute, normalised, in one directory, with
different names, tmp's starting with "."; no directory is created; a symlink
at tmp is refused; a stale file there is unlinked, never written through (it
may be a hard link), as tmp is created with O_EXCL; a put naming another
pending put's tmp (or a tmp naming a pending path) is refused; the rename
first checks that tmp is still the inode verified; a file without a name
cannot be opened or replaced by anyone before it is placed. A get reads
regular files only and never follows a symlink at its path. Nothing from a
request is evaluated, imported or given to a shell. Memory stays bounded: data moves in
pieces of at most 1 MiB.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import select
import stat
import sys
import threading
import time

HELPER = "airflow-transfer-bundle"
VERSION = 3
PIECE = 1 << 20
GET_MAX = 64 << 20  # a get holds its file in memory to send the digest ahead of the bytes
UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)  # fsync refused by the filesystem, not failed
# O_NOATIME: the read-back must not move the atime just set (allowed: the sink owns what it creates).
CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOATIME", 0)
HEX = "0123456789abcdefABCDEF"
# Linux: a put's bytes go to a file with no name (O_TMPFILE) in its directory, and it is given its
# final name only once verified (a hard link through /proc/self/fd). That is one directory entry
# per file where a named temporary costs two (created, then renamed), and no other process can
# open or replace the file before it is placed. AIRFLOW_TRANSFER_BUNDLE_TMPFILE=0 turns it off
# (tests of the named path; a filesystem that misbehaves). Each filesystem is tried once first.
UNNAMED = 0
if hasattr(os, "O_TMPFILE") and os.environ.get("AIRFLOW_TRANSFER_BUNDLE_TMPFILE") != "0":
    UNNAMED = os.O_TMPFILE | os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOATIME", 0)


# hashlib's digests only: a copy verified with another algorithm (adler32, crc32c, xxh128, blake3)
# sends its small files over SFTP, where the checksum helper computes them.
ALGORITHMS = {"md5": hashlib.md5, "sha1": hashlib.sha1, "sha256": hashlib.sha256, "blake2b": hashlib.blake2b}


def _load_syncfs():
    # AIRFLOW_TRANSFER_BUNDLE_SYNC=fsync forces the per-file path (tests; a filesystem whose syncfs lies).
    if os.environ.get("AIRFLOW_TRANSFER_BUNDLE_SYNC") == "fsync" or not sys.platform.startswith("linux"):
        return None
    try:
        # optional: a remote Python may be built without ctypes; then every file is fsynced
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (ImportError, OSError, AttributeError):
        return None
    call.argtypes, call.restype = [ctypes.c_int], ctypes.c_int
    return lambda fd: 0 if call(fd) == 0 else (ctypes.get_errno() or errno.EIO)


def _max_pending():
    # Every pending put keeps its fd until the commit: a group is bounded by the fd limit.
    try:
        # optional: not every platform has the resource module
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, 1 << 16) if hard != resource.RLIM_INFINITY else 1 << 16
        if 0 <= soft < want:
            # Within the hard limit, so allowed: a committing group and the next one both hold fds.
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    except (ImportError, OSError, ValueError):
        soft = 256
    return max(8, (soft if 0 <= soft <= 1 << 16 else 1 << 16) - 32)


def _load_umask():
    # Read, not set: os.umask() would change it for a moment for every thread of the process.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None  # unknown: every put's mode is set with fchmod


def _line(obj):
    """A request or reply as one line of ASCII JSON."""
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


_STR = json.encoder.encode_basestring_ascii
_INFINITE = (float("-inf"), float("inf"))


def _text(value):
    """A put header's string field as json.dumps writes it (ASCII), or None for a value it
    would not write as a string or null (_put_fields then leaves the header to json.dumps)."""
    if value is None:
        return "null"
    return _STR(value) if type(value) is str else None


_PUT_KEYS = ("id", "mac", "tmp", "path", "size", "mode", "mtime", "algo", "digest")


def _put_fields(request_id, mac, tmp, path, size, mode, mtime, algo, digest):
    """_line of a put header with these fields, written once per file: formatted directly when
    they are as the client sends them, in _PUT_KEYS' order, with json's own escaping of strings
    and repr of numbers; anything else goes to json.dumps."""
    texts = (_text(mac), _text(tmp), _text(path), _text(algo), _text(digest))
    if (
        type(request_id) is not int
        or type(size) is not int
        or (mode is not None and type(mode) is not int)
        or type(mtime) not in (int, float)
        or mtime != mtime
        or mtime in _INFINITE
        or None in texts
    ):
        return _line(
            dict(zip(("op",) + _PUT_KEYS, ("put", request_id, mac, tmp, path, size, mode, mtime, algo, digest)))
        )
    return (
        '{"op":"put","id":%d,"mac":%s,"tmp":%s,"path":%s,"size":%d,"mode":%s,"mtime":%s,"algo":%s,"digest":%s}\n'
        % (
            (request_id,)
            + texts[:3]
            + (
                size,
                "null" if mode is None else int.__repr__(mode),
                (float.__repr__ if type(mtime) is float else int.__repr__)(mtime),
            )
            + texts[3:]
        )
    ).encode("ascii")


def _mac(key, asked):
    """The mac a confined put carries: BLAKE2b in its keyed mode, a MAC by design, one call into
    C where HMAC-SHA256 took three times as long (the client computes it per file as well)."""
    return hashlib.blake2b(asked.encode("utf-8", "surrogatepass"), key=key, digest_size=32).hexdigest()


def _mtime_changed(now, listed):
    """At the listing's precision: sub-second where it had it, whole seconds (an SFTP listing).
    The engine's rule (sftp_jobs.mtime_changed), restated: this file runs alone, stdlib only."""
    if listed != int(listed):
        return abs(now - listed) > 1e-6
    return int(now) != int(listed)


OPS = ("commit", "confine", "echo", "emit", "fail", "get", "hello", "put", "relay", "send")
SYNCFS = _load_syncfs()
MAX_PENDING = _max_pending()
UMASK = _load_umask()


class RequestError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code


_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by its __init__, untyped


def _scanned(line):
    """The object a request line as the client writes it holds (an object from the first byte,
    then the newline), straight from json's scanner; None for any other line. Half the time of
    json.loads, which first guesses the encoding of bytes and skips whitespace."""
    try:
        text = line.decode("utf-8")
        if text[:1] != "{":
            return None
        request, end = _SCAN(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError):
        return None
    return request if end == len(text) - (text[-1:] == "\n") else None


def _request(line):
    """The JSON object a request line holds; anything else is a bad request."""
    request = _scanned(line)
    if request is None:  # not as the client writes it: json.loads decides, and says what is wrong
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise RequestError("EBADREQ", "request is not valid JSON: %s" % exc) from exc
    if isinstance(request, dict):
        return request
    raise RequestError("EBADREQ", "request must be a JSON object")


def _error(exc):
    """(code, one-line message) for an exception."""
    if isinstance(exc, RequestError):
        return exc.code, str(exc)
    if isinstance(exc, OSError):
        code = errno.errorcode.get(exc.errno, "EIO") if exc.errno else "EIO"
        return code, "%s: %s" % (exc.strerror or exc, exc.filename if exc.filename is not None else "")
    if isinstance(exc, UnicodeError):  # a name with a lone surrogate cannot become bytes
        return "EBADREQ", "%s: %s" % (type(exc).__name__, exc)
    return "EINTERNAL", "%s: %s" % (type(exc).__name__, exc)


# None where the platform has no posix_fadvise (macOS): nothing is advised, cache_dropped is false.
DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None) if hasattr(os, "posix_fadvise") else None
WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None) if hasattr(os, "posix_fadvise") else None


def _advise(fd, advice):
    if advice is None:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, advice)
    except OSError:
        return False
    return True


def _drop_cache(fd):
    return _advise(fd, DONTNEED)


class Put:
    """One file of a group, from its header to its entry in the commit's reply."""

    __slots__ = tuple(
        "id tmp path folder mode mtime algo expected fd created unnamed error digest synced dropped stat size".split()
    )

    def __init__(self, request_id):
        self.id, self.tmp, self.path, self.folder = request_id, "", "", ""
        self.mode = self.mtime = self.algo = self.expected = self.fd = self.error = self.digest = self.stat = None
        self.created = self.synced = self.dropped = False
        self.size = 0  # bytes written
        self.unnamed = False  # its bytes are in a file without a name (UNNAMED) until it is placed

    def fail(self, code, message, **extra):
        if self.error is None:
            self.error = dict(extra, code=code, error=message)
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass  # the put has failed already; a write-back error on close changes nothing
        if self.created:
            self.created = False
            try:
                os.unlink(self.tmp)
            except OSError:
                pass  # gone already; a temporary name is never final anyway

    def guard(self, step, *args):
        """Run one step unless the put failed already; an error fails this put only."""
        if self.error is None:
            try:
                step(*args)
            except Exception as exc:  # noqa: BLE001 - one file's error must not desynchronise the stream
                self.fail(*_error(exc))

    def reply(self, named=False):
        if self.error is not None:
            return dict(self.error, id=self.id, ok=False)
        done = dict(id=self.id, ok=True, digest=self.digest, fsynced=self.synced, cache_dropped=self.dropped)
        if named:
            done["path"] = self.path
        return done


class Commit:
    """A group's commit: its puts and what the commit request asked for. Serving a stream, its
    flush (syncfs, or an fsync per file) runs in a thread, which only waits on the kernel; the
    rest runs on the serving thread (Sink.wait_commit). Two threads running Python per file
    (reading the next group, verifying this one) spent more CPU handing the interpreter lock to
    each other than the work itself took."""

    def __init__(self, request_id, puts, want_fsync, want_drop, brief, received):
        self.request_id, self.puts, self.received = request_id, puts, received
        self.want_fsync, self.want_drop, self.brief = want_fsync, want_drop, brief
        self.durability, self.error, self.done, self.thread = "none", None, not want_fsync, None

    def live(self):
        return [p for p in self.puts if p.fd is not None]

    def start(self, flush):
        if not self.done:
            self.thread = threading.Thread(target=self._run, args=(flush, self.live()))
            self.thread.start()

    def _run(self, flush, live):
        try:
            self.durability = flush(live)
        except Exception as exc:  # noqa: BLE001 - the commit's reply reports it
            self.error = exc
        finally:
            self.done = True

    def join(self):
        if self.thread is not None:
            self.thread.join()

    def close(self):
        for put in self.puts:
            if put.fd is not None:
                os.close(put.fd)


def _fileno(stream):
    """The descriptor under stream, for select; None for a stream without one (in memory).
    Bytes a buffered stream holds are invisible to select, but only its first read can find
    any: read1 of a piece reads past an empty buffer, which then stays empty."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _link_unnamed(fd, path):
    """Give the file open as fd (made with UNNAMED) the name path; FileExistsError if path exists."""
    # src_dir_fd makes os.link call linkat(2), which follows the /proc link with the flag
    # follow_symlinks sets (link(2) would not); the path is absolute, so the fd is not used.
    os.link("/proc/self/fd/%d" % fd, path, src_dir_fd=fd, follow_symlinks=True)


def _open_unnamed(put, folder):
    """Open put's file without a name in folder; False where that fails (the named temporary
    then says what is wrong with the directory)."""
    # Nobody can open a file without a name: it may have its final permissions from the start
    # (special bits excepted), and then needs no fchmod.
    mode = put.mode
    perms = mode & 0o777 if mode is not None and not mode & 0o7000 else 0o600
    try:
        put.fd = os.open(folder, UNNAMED, perms)
    except OSError:
        return False
    put.unnamed = True
    if mode is not None and UMASK is not None and perms & ~UMASK == mode & 0o7777:
        put.mode = None
    return True


def _clear_stale(tmp):
    """Make way at tmp for a file of ours: a symlink there is refused, anything else unlinked
    (a stale temporary: replaced, never written through; it may be a hard link)."""
    if stat.S_ISLNK(os.lstat(tmp).st_mode):
        raise RequestError("EBADREQ", "tmp is a symbolic link (not followed): %s" % tmp) from None
    os.unlink(tmp)


def _can_name_unnamed(folder):
    """Whether a file without a name can be made in folder and then named: the filesystem must
    support O_TMPFILE and /proc must be mounted. Tried with an empty file, named and unlinked."""
    try:
        fd = os.open(folder, UNNAMED, 0o600)
    except OSError:
        return False
    probe = "%s/.airflow-transfer-probe-%d-%d" % (folder.rstrip("/"), os.getpid(), threading.get_ident())
    try:
        _link_unnamed(fd, probe)
        os.unlink(probe)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _split(name, value):
    """(folder, name) of an absolute path that normpath would leave as it is and that holds no
    NUL or "//" (normpath keeps a leading one). Tested by its parts, not through normpath: this
    runs twice per file."""
    if (
        not isinstance(value, str)
        or value[:1] != "/"
        or "\0" in value
        or "//" in value
        or (value[-1:] == "/" and value != "/")
        or "/./" in value
        or "/../" in value
        or value.endswith(("/.", "/.."))
    ):
        raise RequestError("EBADREQ", "%s must be an absolute normalised path (got %r)" % (name, value))
    folder, _, base = value.rpartition("/")
    return folder or "/", base


class Sink:
    def __init__(self, stdin=None, stdout=None):
        """Serves a stream, or (no stdin) is driven in-process through begin/feed/end/commit:
        the client lands downloaded files with the same steps as this host's uploads."""
        # read1: at most one read(2) per call, and what the bootstrap's readline buffered comes first.
        self.read = (getattr(stdin, "read1", None) or stdin.read) if stdin is not None else None
        self.fileno = _fileno(stdin)
        self.out = stdout
        self.buf, self.pos = b"", 0
        self.pending, self.tmps, self.paths, self.exit_code = [], set(), set(), None
        self.held = 0  # bytes of get replies written and not yet flushed
        # The commit running in its own thread while a stream is served (see the module's text),
        # with the names and fds of its group: a put may not touch either until it is done.
        self.committing, self.busy_names, self.busy_fds = None, set(), 0
        self.out_lock = threading.Lock()
        # Whether a file without a name can be made and then named (UNNAMED), per directory and
        # per filesystem (st_dev): tried once on each filesystem (_can_name_unnamed).
        self.unnamed_dirs, self.unnamed_devs = {}, {}
        self.relay = False  # replies go out as echo requests, to the helper reading this output
        self.root = self.key = None  # set by confine: puts outside root, or without key's mac, are refused
        self.group_t0, self.group_bytes = None, 0  # when the open group's first request came; its bytes

    def _more(self, keep):
        if self.held:
            # Get replies leave when the requests read so far are answered (or a piece's worth
            # is held): a group of gets goes out in a few large writes, not one per file.
            self.out.flush()
            self.held = 0
        if self.committing is not None and (self.committing.done or not self._readable()):
            self.wait_commit()  # nothing to read yet: its reply may be what the client waits for
        data = self.read(PIECE)
        if data:
            self.buf, self.pos = (self.buf[self.pos :] + data if keep else data), 0
        return bool(data)

    def _readable(self):
        """Whether the stream has bytes waiting. A stream in memory always has (it never blocks);
        where select cannot tell (a descriptor past its limit), no: the commit is finished first."""
        if self.fileno is None:
            return True
        try:
            return bool(select.select([self.fileno], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def line(self):
        """The next line; b"" at EOF (a last line without its newline was cut short); None past 1 MiB."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line, self.pos = self.buf[self.pos : end + 1], end + 1
                return line
            if len(self.buf) - self.pos > PIECE:
                return None
            if not self._more(True):
                return b""

    def take(self, n):
        """Up to n of the next bytes of the stream, without copying them; empty at EOF."""
        if self.pos >= len(self.buf) and not self._more(False):
            return b""
        end = min(len(self.buf), self.pos + n)
        piece, self.pos = memoryview(self.buf)[self.pos : end], end
        return piece

    def hello(self, request):
        # What the client needs to choose this path: who answers, what it can digest, how a
        # group is made durable, and how many files one group may hold.
        durability = "fsync" if SYNCFS is None else "syncfs"
        python = "%d.%d.%d" % sys.version_info[:3]
        return dict(
            ok=True,
            helper=HELPER,
            version=VERSION,
            ops=sorted(OPS),
            python=python,
            algorithms=sorted(ALGORITHMS),
            durability=durability,
            max_pending=MAX_PENDING,
        )

    def _create(self, put, request):
        folder, name = _split("tmp", request.get("tmp"))
        path_folder, path_name = _split("path", request.get("path"))
        if path_folder != folder or name[:1] != "." or not path_name or name == path_name:
            raise RequestError("EBADREQ", "tmp must be another .name in path's directory: %r" % (request,))
        if self.root is not None and folder != self.root and not folder.startswith(self.root.rstrip("/") + "/"):
            raise RequestError("EBADREQ", "%s is outside the destination root %s" % (request["path"], self.root))
        if self.key is not None:
            asked = "%s\0%s\0%s" % (request.get("id"), request["tmp"], request["path"])
            want = _mac(self.key, asked)
            mac = request.get("mac")
            if not isinstance(mac, str) or not hmac.compare_digest(mac, want):
                raise RequestError(
                    "EBADREQ", "a put the client did not ask for (its mac does not match): %s" % request["path"]
                )
        put.tmp, put.path, put.folder = request["tmp"], request["path"], folder
        if (
            put.tmp in self.busy_names
            or put.path in self.busy_names
            or len(self.pending) + self.busy_fds >= MAX_PENDING
        ):
            self.wait_commit()  # the committing group still holds that name, or the fds the put needs
        if put.tmp in self.tmps or put.tmp in self.paths or put.path in self.tmps:
            # else one rename of the group could move another put's file, or put it under a wrong name
            raise RequestError("EBADREQ", "tmp or path is another pending put's tmp or path: %s" % put.tmp)
        get = request.get
        mode, mtime, algo, digest = get("mode"), get("mtime"), get("algo"), get("digest")
        if not (mode is None or (type(mode) is int and mode >= 0)):
            raise RequestError("EBADREQ", "mode must be null or a whole number >= 0 (got %r)" % (mode,))
        if not (mtime is None or (type(mtime) in (int, float) and -1e15 < mtime < 1e15)):  # NaN fails too
            raise RequestError("EBADREQ", "mtime must be null or a number of seconds (got %r)" % (mtime,))
        if algo is not None and algo not in ALGORITHMS:
            raise RequestError("ENOALGO", "%r is not available here; available: %s" % (algo, ", ".join(ALGORITHMS)))
        hex_digest = isinstance(digest, str) and digest != "" and digest.strip(HEX) == ""
        if (algo is None) != (digest is None) or (digest is not None and not hex_digest):
            raise RequestError(
                "EBADREQ", "digest must be hex with an algo, or null with algo null (got %r)" % (digest,)
            )
        if len(self.pending) >= MAX_PENDING:
            raise RequestError("EMFILE", "more than %d puts pending; commit smaller groups" % MAX_PENDING)
        put.mode, put.mtime, put.algo, put.expected = mode, mtime, algo, digest and digest.lower()
        if not (UNNAMED and self._unnamed_here(folder) and _open_unnamed(put, folder)):
            try:
                put.fd = os.open(put.tmp, CREATE, 0o600)
            except FileExistsError:
                _clear_stale(put.tmp)
                put.fd = os.open(put.tmp, CREATE, 0o600)
            put.created = True
        self.tmps.add(put.tmp)
        self.paths.add(put.path)

    def _unnamed_here(self, folder):
        ok = self.unnamed_dirs.get(folder)
        if ok is None:
            try:
                device = os.stat(folder).st_dev
            except OSError:
                return False  # not cached: the named temporary reports the error, and it may be fixed
            ok = self.unnamed_devs.get(device)
            if ok is None:
                ok = self.unnamed_devs[device] = _can_name_unnamed(folder)
            self.unnamed_dirs[folder] = ok
        return ok

    def _write(self, put, piece):
        put.size += len(piece)
        while piece:
            piece = piece[os.write(put.fd, piece) :]

    def _finish(self, put):
        if put.mode is not None:
            os.fchmod(put.fd, put.mode & 0o7777)
        if put.mtime is not None:
            os.utime(put.fd, (put.mtime, put.mtime))

    def begin(self, request):
        """A put's header: its temporary file is created (or the put failed, kept for the commit)."""
        put = Put(request.get("id"))
        put.guard(self._create, put, request)
        return put

    def feed(self, put, piece):
        put.guard(self._write, put, piece)

    def end(self, put):
        """All of the put's bytes are written: mode and mtime, then it waits for the commit."""
        put.guard(self._finish, put)
        self.pending.append(put)

    def put(self, request):
        size = request.get("size")
        if type(size) is not int or size < 0:
            self.exit_code = 2
            raise RequestError("EBADREQ", "put size must be a whole number >= 0 (got %r); stream unframed" % (size,))
        self._opened()
        self.group_bytes += size
        put = self.begin(request)
        while size:
            piece = self.take(size)
            if not piece:  # EOF inside the data: a truncated file is worth nothing
                put.fail("EIO", "stream ended inside the data")
                self.exit_code = 0
                return
            size -= len(piece)
            self.feed(put, piece)
        self.end(put)

    def _read_file(self, request):
        """(bytes, stat, digest) of the regular file a get or send names, read whole."""
        _split("path", request.get("path"))
        path, algo = request["path"], request.get("algo")
        if algo is not None and algo not in ALGORITHMS:
            raise RequestError("ENOALGO", "%r is not available here; available: %s" % (algo, ", ".join(ALGORITHMS)))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RequestError("EBADREQ", "not a regular file: %s" % path)
            if st.st_size > GET_MAX:
                raise RequestError("EFBIG", "%s has %d bytes, more than a get sends (%d)" % (path, st.st_size, GET_MAX))
            # One byte more than its size is asked for: it shows a file that grew. A first read
            # that returns exactly its size is the whole file; a small file then costs one read
            # instead of a second one to find the end (what grows after it is read is not sent).
            want = st.st_size + 1
            data = os.read(fd, min(want, PIECE))
            if len(data) != st.st_size:  # a piece of a larger file, a short read, or a file that grew
                pieces, left = [data], want - len(data)
                while left > 0:
                    piece = os.read(fd, min(left, PIECE))
                    if not piece:
                        break
                    pieces.append(piece)
                    left -= len(piece)
                data = b"".join(pieces)
        finally:
            os.close(fd)
        if len(data) != st.st_size:
            raise RequestError("ECHANGED", "%s changed size while it was read" % path)
        return data, st, ALGORITHMS[algo](data).hexdigest() if algo is not None else None

    def get(self, request):
        """Send one file whole, its digest ahead of its bytes; errors are answered by handle()."""
        data, st, digest = self._read_file(request)
        head = dict(
            id=request.get("id"),
            ok=True,
            size=len(data),
            mode=stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
            digest=digest,
        )
        self._emit(_line(head), data)

    def _emit(self, line, data=b""):
        """Write a line (and bytes) out; flushed a piece at a time, and when the requests run out."""
        self.out.write(line)
        if data:
            self.out.write(data)
        self.held += len(line) + len(data)
        if self.held >= PIECE:
            self.out.flush()
            self.held = 0

    def send_file(self, request):
        """A file as a put for the helper reading this output (see the module's text); a file
        that cannot be sent becomes a fail request, so that its group's commit reports it."""
        request_id = request.get("id")
        try:
            size, mtime = request.get("size"), request.get("mtime")
            if type(size) is not int or type(mtime) not in (int, float):
                raise RequestError("EBADREQ", "send needs the listed size and mtime: %r" % (request,))
            data, st, digest = self._read_file(request)
            if len(data) != size or _mtime_changed(st.st_mtime, mtime):
                raise RequestError("ECHANGED", "source changed since it was listed: %s" % request["path"])
            get = request.get
            line = _put_fields(
                request_id, get("mac"), get("tmp"), get("dst"), size, get("mode"), mtime, get("algo"), digest
            )
        except Exception as exc:  # noqa: BLE001 - one file's failure travels to the commit
            code, message = _error(exc)
            data = b""
            line = _line(dict(op="fail", id=request_id, code=code, error=message, source=True))
        self._emit(line, data)

    def emit(self, request):
        line = request.get("line")
        if not isinstance(line, dict):
            raise RequestError("EBADREQ", "emit needs an object as its line: %r" % (request,))
        self._emit(_line(line))

    def confine(self, request):
        """Set the root and key every later put is checked against; once only (see the module's text)."""
        if self.root is not None:
            raise RequestError("EBADREQ", "the destination root is set already: %s" % self.root)
        _split("root", request.get("root"))
        key = request.get("key")
        if not isinstance(key, str) or not 32 <= len(key) <= 128 or key.strip(HEX) != "":
            raise RequestError("EBADREQ", "confine needs a key of 16 to 64 bytes, in hex")
        self.root, self.key = request["root"], bytes.fromhex(key)
        return {"ok": True}

    def failed(self, request):
        """A file the sending helper could not send: its entry in the group's commit."""
        self._opened()
        put = Put(request.get("id"))
        code, message = request.get("code"), request.get("error")
        put.error = dict(code=code if isinstance(code, str) else "EIO", error=str(message), source=True)
        self.pending.append(put)

    def _opened(self):
        if self.group_t0 is None:
            self.group_t0 = time.monotonic()

    def _flush(self, puts):
        """Make every live put durable: one syncfs per filesystem, an fsync per file where that fails."""
        rest = puts
        if SYNCFS is not None:
            devices, by_device, rest = {}, {}, []
            for put in puts:
                if put.folder not in devices:
                    devices[put.folder] = os.fstat(put.fd).st_dev
                by_device.setdefault(devices[put.folder], []).append(put)
            for group in by_device.values():
                if SYNCFS(group[0].fd) == 0:
                    for put in group:
                        put.synced = True
                else:
                    rest.extend(group)  # an fsync per file tells which files an error concerns
        for put in rest:
            try:
                os.fsync(put.fd)
                put.synced = True
            except OSError as exc:
                if exc.errno not in UNSUPPORTED:
                    put.fail(*_error(exc))
        return "syncfs" if SYNCFS is not None and not rest else "fsync"

    def _verify(self, put):
        if put.algo is None:
            return
        fd, hasher = put.fd, ALGORITHMS[put.algo]()
        # Positioned reads up to the file's size: no seek, and no read past the end to find it.
        # A named temporary's comes from fstat (kept for _rename's identity check). A file
        # longer or shorter than what was sent fails on its digest all the same.
        if put.unnamed:  # nobody else can open it: its size is what was written
            size = put.size
        else:
            put.stat = os.fstat(fd)
            size = put.stat.st_size
        done = 0
        while done < size:
            piece = os.pread(fd, min(PIECE, size - done), done)
            if not piece:
                break
            hasher.update(piece)
            done += len(piece)
        put.digest = hasher.hexdigest()
        if put.digest != put.expected:
            message = "%s of %s is %s, the source's is %s" % (put.algo, put.tmp, put.digest, put.expected)
            put.fail("EMISMATCH", message, digest=put.digest, expected=put.expected)

    def _rename(self, put):
        if put.unnamed:
            try:
                _link_unnamed(put.fd, put.path)
            except FileExistsError:
                self._name_at_tmp(put)  # something holds the final name: replaced below, as a named one
            else:
                fd, put.fd = put.fd, None
                os.close(fd)
                return
        mine = put.stat or os.fstat(put.fd)
        put.created = False  # from here on the name may not be ours: an error leaves it alone
        there = os.lstat(put.tmp)
        if (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
            # Another writer (say a sink left over from a lost connection) replaced tmp after it was verified.
            raise RequestError("ECHANGED", "%s was replaced by another writer before its rename" % put.tmp)
        fd, put.fd = put.fd, None
        os.close(fd)
        try:
            os.replace(put.tmp, put.path)
        except OSError:
            put.created = True  # still the file checked above, verified but impossible to place: removed
            raise

    def _name_at_tmp(self, put):
        """Give an unnamed put its temporary name, so that a rename can replace the final one."""
        try:
            _link_unnamed(put.fd, put.tmp)
        except FileExistsError:
            _clear_stale(put.tmp)
            _link_unnamed(put.fd, put.tmp)
        put.unnamed, put.created = False, True

    def _take_group(self, request):
        want_fsync, want_drop = request.get("fsync", True), request.get("drop_cache", True)
        brief = request.get("brief", False)
        if type(want_fsync) is not bool or type(want_drop) is not bool or type(brief) is not bool:
            raise RequestError("EBADREQ", "fsync, drop_cache and brief must be true or false: %r" % (request,))
        puts, self.pending, self.tmps, self.paths = self.pending, [], set(), set()
        t0, self.group_t0 = self.group_t0, None
        received = dict(bytes=self.group_bytes, seconds=round(time.monotonic() - t0, 6) if t0 is not None else 0.0)
        self.group_bytes = 0
        return Commit(request.get("id"), puts, want_fsync, want_drop, brief, received)

    def commit(self, request):
        """A group's commit, done before returning (in-process use)."""
        group = self._take_group(request)
        try:
            return self._place(group, self._flush(group.live()) if group.want_fsync else "none")
        finally:
            group.close()

    def commit_behind(self, request):
        """Start a group's flush in a thread; the rest of its commit, and its reply, follow on
        this thread once the flush is done (serving a stream: see the module's text)."""
        self.wait_commit()
        group = self._take_group(request)
        for put in group.puts:
            self.busy_names.update((put.tmp, put.path))
        self.busy_fds = len(group.live())
        self.committing = group
        group.start(self._flush)

    def wait_commit(self):
        """Finish the commit running behind, if any: wait for its flush, then place and answer."""
        group = self.committing
        if group is None:
            return
        group.join()
        try:
            if group.error is not None:
                raise group.error
            reply = self._place(group, group.durability)
        except Exception as exc:  # noqa: BLE001 - answered like any failed request
            reply = dict(zip(("code", "error"), _error(exc)), ok=False)
        finally:
            self.committing, self.busy_names, self.busy_fds = None, set(), 0
            group.close()
        reply["id"] = group.request_id
        try:
            self.send(reply)
        except (OSError, ValueError):
            pass  # the client went away (a closed pipe); its journal judges what landed

    def _place(self, group, durability):
        """A flushed group: read back, compare digests, name the verified files, sync their
        directories; the commit's reply. Its fds stay open for the caller to close."""
        puts, want_drop = group.puts, group.want_drop
        if want_drop:
            # Every file's pages dropped, then its read from storage started, before the first
            # is read back: the group's reads queue on the device together, not one by one.
            # Dirty pages survive DONTNEED: only a flushed file is read back from storage.
            live = [p for p in puts if p.error is None and p.algo is not None]
            for put in live:
                put.dropped = _drop_cache(put.fd) and put.synced
            for put in live:
                _advise(put.fd, WILLNEED)
        renamed = {}
        for put in puts:
            put.guard(self._verify, put)
            put.guard(self._rename, put)
            if put.error is None:
                renamed.setdefault(put.folder, []).append(put)
        for folder, done in renamed.items() if group.want_fsync else ():
            try:  # the renames survive a crash only once their directory is synced
                fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                for put in done if exc.errno not in UNSUPPORTED else ():
                    put.synced = False
        reply = dict(group.received, ok=True, durability=durability)
        if group.brief:
            # A placed file is its id alone: the client needs no more to count it, and the
            # lines of a large group's full entries cost both ends more than its commit did.
            reply["files"] = [put.id if put.error is None else put.reply() for put in puts]
        else:
            reply["files"] = [put.reply(self.root is not None) for put in puts]
        return reply

    def handle(self, line):
        request_id = op = None
        try:
            request = _request(line)
            request_id, op = request.get("id"), request.get("op")
            if op == "put":
                return self.put(request)  # answered at the commit
            if op == "send":
                return self.send_file(request)  # a put (or a fail) for the next helper
            if op == "fail":
                return self.failed(request)  # answered at the commit
            if op == "echo" and isinstance(request.get("reply"), dict):
                return request["reply"]  # a reply of the helper writing this stream, as it is
            if op == "get":
                self.wait_commit()  # replies keep request order
                return self.get(request)  # answered with its bytes, or by the error below
            if op == "emit":
                return self.emit(request)
            if op == "relay":
                self.relay = True
                reply = {"ok": True}
            elif op == "confine":
                reply = self.confine(request)
            elif op == "commit" and self.read is not None:
                return self.commit_behind(request)  # answered when it is done
            elif op in ("hello", "commit"):
                reply = self.hello(request) if op == "hello" else self.commit(request)
            else:
                raise RequestError("EBADREQ", "unknown op %r; known: %s" % (op, ", ".join(OPS)))
        except Exception as exc:  # noqa: BLE001 - keep serving: one bad request must not end the session
            reply = dict(zip(("code", "error"), _error(exc)), ok=False)
            if op == "put" and not isinstance(exc, RequestError):
                self.exit_code = 2  # a bug mid-put: how much of its data was read is unknown
        if self.exit_code is not None:
            reply["fatal"] = True
        reply["id"] = request_id
        return reply

    def send(self, reply):
        if self.relay:
            reply = {"op": "echo", "reply": reply}
        data = _line(reply)
        with self.out_lock:
            self.out.write(data)
            self.out.flush()
            self.held = 0

    def answer(self, reply):
        """Send a reply from the reading side, after the running commit's: replies keep request order."""
        self.wait_commit()
        self.send(reply)

    def serve(self):
        try:
            while self.exit_code is None:
                line = self.line()
                if line is None:
                    self.exit_code = 2
                    self.answer({"id": None, "ok": False, "code": "EBADREQ", "error": "line over 1 MiB", "fatal": True})
                elif not line:
                    return 0
                elif line.strip():
                    reply = self.handle(line)
                    if reply is not None:
                        self.answer(reply)
                    elif self.committing is not None and self.committing.done:
                        self.wait_commit()  # flushed: placed and answered now, between two puts
            return self.exit_code
        finally:
            self.wait_commit()  # a commit read before EOF (or a fatal request) is finished


def main(stdin=None, stdout=None):
    try:
        # A buffer of a piece: the replies to a group of gets leave in large writes.
        out = stdout or open(sys.stdout.fileno(), "wb", buffering=PIECE, closefd=False)
        return Sink(stdin or sys.stdin.buffer, out).serve()
    except BrokenPipeError:
        return 1  # the client went away; pending temporaries stay for its journal


if __name__ == "__main__":
    sys.exit(main())
