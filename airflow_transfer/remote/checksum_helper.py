"""Destination-side checksum helper: stdlib only, python3 >= 3.8, one file.

Computes digests of files after they are on the destination's disk, for the
end-to-end verification of Liu, Jung, Kettimuthu, Sun, Towards Optimizing
Large-Scale Data Transfers with End-to-End Integrity Verification
(docs/integrity.md). It is meant to be sent over SSH exec and kept running:

    python3 -I -c 'import sys;exec(sys.stdin.read(int(sys.stdin.readline())))'

then, on its stdin, a line with the length of this source, the source,
and JSON requests one per line. Run directly (`python3 checksum_helper.py`)
it reads requests from stdin straight away. Replies are JSON lines, in
request order, ASCII only whatever the remote locale.

Requests:
  {"op": "hello", "id": 1}
  {"op": "digest", "id": 2, "path": "/data/f", "algo": "sha256",
   "offset": 0, "length": null, "block_size": 1048576,
   "fsync": true, "drop_cache": true}
"op" defaults to "digest"; offset 0, length null (to end of file),
block_size null (no per-block digests), fsync and drop_cache true.

Replies: {"id": .., "ok": true, "digest": hex, "blocks": [hex, ...], "length":
bytes read, "fsynced": bool, "cache_dropped": bool, ...} or {"id": .., "ok":
false, "code": "ENOENT", "error": "one line"}. Codes are errno names for
operating-system errors, plus EBADREQ (malformed request), ENOALGO
(algorithm not available here), ENOTREG (not a regular file), ESHORT (file
ends before offset+length) and EINTERNAL (a bug in this helper).

Reading back from disk, not from memory: the file is fsync'ed (its dirty
pages reach the device) and then posix_fadvise(DONTNEED) drops its clean
pages, so the read goes to storage. Limits: DONTNEED is advice; pages mapped
or locked by another process stay; caches below the kernel (RAID controller,
drive, NFS/GPFS/Lustre servers, a hypervisor's host cache) are not touched;
without posix_fadvise (macOS) or with fsync refused (some network file
systems) the reply says so with fsynced / cache_dropped false. Pages are
dropped again after reading so verification does not evict useful cache.

Safety: a request names a file and an algorithm from a fixed table. Nothing
from a request is evaluated, imported or passed to a shell.
"""

import errno
import hashlib
import json
import os
import stat
import sys
import time
import zlib

HELPER = "airflow-transfer-checksum"
VERSION = 1
READ_SIZE = 1 << 20


class _Checksum32:
    """A 32-bit running checksum (zlib.adler32's calling convention) with hashlib's update/hexdigest."""

    def __init__(self, update, start):
        self._update, self.value = update, start

    def update(self, data):
        self.value = self._update(data, self.value)

    def hexdigest(self):
        return "%08x" % self.value


def _factories():
    table = {
        "md5": hashlib.md5,
        "sha1": hashlib.sha1,
        "sha256": hashlib.sha256,
        "blake2b": hashlib.blake2b,
        "adler32": lambda: _Checksum32(zlib.adler32, 1),
    }
    # Optional extras, used only when the remote happens to have them; the
    # client learns what is here from the hello reply.
    try:
        # optional: not in the standard library; a remote host without it offers no crc32c
        import crc32c as _crc32c_module

        table["crc32c"] = lambda: _Checksum32(_crc32c_module.crc32c, 0)
    except ImportError:
        pass
    try:
        # optional: not in the standard library; a remote host without it offers no xxh128
        import xxhash as _xxhash_module

        table["xxh128"] = _xxhash_module.xxh3_128
    except ImportError:
        pass
    try:
        # optional: not in the standard library; a remote host without it offers no blake3
        import blake3 as _blake3_module

        table["blake3"] = lambda: _blake3_module.blake3(max_threads=1)
    except ImportError:
        pass
    return table


ALGORITHMS = _factories()


class RequestError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code


def _int_field(request, name, default, minimum):
    value = request.get(name, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError("EBADREQ", "%s must be a whole number >= %d (got %r)" % (name, minimum, value))
    return value


def _bool_field(request, name):
    value = request.get(name, True)
    if not isinstance(value, bool):
        raise RequestError("EBADREQ", "%s must be true or false (got %r)" % (name, value))
    return value


def _open_regular(path):
    # O_NONBLOCK so a FIFO planted under the name cannot hang the helper.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise RequestError("ENOTREG", "not a regular file: %s" % path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _drop_cache(fd, offset, length):
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        os.posix_fadvise(fd, offset, length or 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        return False
    return True


def digest(request):
    path = request.get("path")
    if not isinstance(path, str) or not path:
        raise RequestError("EBADREQ", "path must be a non-empty string")
    algo = request.get("algo")
    if algo not in ALGORITHMS:
        raise RequestError(
            "ENOALGO",
            "algorithm %r is not available on this host; available: %s" % (algo, ", ".join(sorted(ALGORITHMS))),
        )
    offset = _int_field(request, "offset", 0, 0)
    length = _int_field(request, "length", None, 0)
    block_size = _int_field(request, "block_size", None, 0) or 0
    want_fsync = _bool_field(request, "fsync")
    want_drop = _bool_field(request, "drop_cache")
    factory = ALGORITHMS[algo]

    started = time.time()
    fd = _open_regular(path)
    try:
        fsynced = False
        if want_fsync:
            try:
                os.fsync(fd)
                fsynced = True
            except OSError:
                pass  # reported as fsynced: false; the digest is still of the file's content
        dropped = _drop_cache(fd, offset, length) if want_drop else False
        whole = factory()
        blocks = []
        block = None
        filled = 0
        total = 0
        remaining = length
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            f.seek(offset)
            while remaining is None or remaining > 0:
                want = READ_SIZE if remaining is None else min(READ_SIZE, remaining)
                got = f.readinto(view[:want])
                if not got:
                    break
                chunk = view[:got]
                whole.update(chunk)
                total += got
                if remaining is not None:
                    remaining -= got
                while block_size and len(chunk):
                    if block is None:
                        block = factory()
                    take = min(len(chunk), block_size - filled)
                    block.update(chunk[:take])
                    filled += take
                    chunk = chunk[take:]
                    if filled == block_size:
                        blocks.append(block.hexdigest())
                        block, filled = None, 0
        if block is not None:
            blocks.append(block.hexdigest())
        if want_drop:
            _drop_cache(fd, offset, length)
    finally:
        os.close(fd)
    if length is not None and total < length:
        raise RequestError(
            "ESHORT", "file ended early: wanted %d bytes from offset %d, read %d: %s" % (length, offset, total, path)
        )
    return {
        "ok": True,
        "path": path,
        "algo": algo,
        "offset": offset,
        "length": total,
        "digest": whole.hexdigest(),
        "block_size": block_size,
        "blocks": blocks,
        "fsynced": fsynced,
        "cache_dropped": dropped,
        "seconds": round(time.time() - started, 6),
    }


def hello(request):
    return {
        "ok": True,
        "helper": HELPER,
        "version": VERSION,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "algorithms": sorted(ALGORITHMS),
        "fadvise": hasattr(os, "posix_fadvise"),
    }


OPS = {"digest": digest, "hello": hello}


def handle(line):
    request_id = None
    try:
        try:
            request = json.loads(line)
        except ValueError as exc:
            raise RequestError("EBADREQ", "request is not valid JSON: %s" % exc) from exc
        if not isinstance(request, dict):
            raise RequestError("EBADREQ", "request must be a JSON object")
        request_id = request.get("id")
        op = OPS.get(request.get("op", "digest"))
        if op is None:
            raise RequestError("EBADREQ", "unknown op %r; known: %s" % (request.get("op"), ", ".join(sorted(OPS))))
        reply = op(request)
    except RequestError as exc:
        reply = {"ok": False, "code": exc.code, "error": str(exc)}
    except OSError as exc:
        code = errno.errorcode.get(exc.errno, "EIO") if exc.errno else "EIO"
        where = exc.filename if exc.filename is not None else ""
        reply = {"ok": False, "code": code, "error": "%s: %s" % (exc.strerror or exc, where)}
    except Exception as exc:  # noqa: BLE001 - keep serving: one bad request must not end the session
        reply = {"ok": False, "code": "EINTERNAL", "error": "%s: %s" % (type(exc).__name__, exc)}
    reply["id"] = request_id
    return reply


def main(stdin=None, stdout=None):
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    while True:
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        stdout.write(json.dumps(handle(line), ensure_ascii=True, separators=(",", ":")) + "\n")
        stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
