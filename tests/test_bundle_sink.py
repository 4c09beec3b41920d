"""The bundle sink (airflow_transfer/remote/bundle_sink.py) as a real subprocess, over the bootstrap line."""

from __future__ import annotations

import ast
import hashlib
import io
import itertools
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from airflow_transfer.engine.bundle_channel import BOOTSTRAP, sink_preamble
from airflow_transfer.integrity.algorithms import digest_bytes
from airflow_transfer.remote import bundle_sink

SINK_FILE = Path(__file__).resolve().parents[1] / "airflow_transfer" / "remote" / "bundle_sink.py"
BOOT = BOOTSTRAP  # the client's own bootstrap line, and its preamble: the compressed source
PYTHON3 = shutil.which("python3") or sys.executable
PYTHON38 = os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python3")


@pytest.fixture
def python38() -> str:
    # The helper's floor is Python 3.8; machines of this kind carry it under pyenv. Missing, the
    # floor is unproven: that fails, it does not skip.
    assert os.access(PYTHON38, os.X_OK), f"{PYTHON38} not found: install Python 3.8.18 with pyenv to test the floor"
    return PYTHON38


REPLY_TIMEOUT = 120.0  # a hang guard only: nothing here asserts on time


class Sink:
    """A running sink and a small client: puts are framed and unanswered, everything else answered."""

    def __init__(
        self,
        python: str = PYTHON3,
        env: dict[str, str] | None = None,
        fd_limit: int = 0,
        umask: int | None = None,
        wrap: list[str] | None = None,
    ) -> None:
        argv = [python, "-I", "-c", BOOT]
        if fd_limit:
            argv = ["sh", "-c", 'ulimit -n %d && exec "$@"' % fd_limit, "sh", *argv]
        if umask is not None:
            argv = ["sh", "-c", 'umask %03o && exec "$@"' % umask, "sh", *argv]
        argv = [*(wrap or []), *argv]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        # A reader thread: a sink that wrongly stops answering fails the test instead of hanging it.
        threading.Thread(target=self._pump, daemon=True).start()
        self.send_raw(sink_preamble())
        self.next_id = 1

    def _pump(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.put(line)
        self.lines.put(b"")

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def reply(self) -> dict:
        line = self.lines.get(timeout=REPLY_TIMEOUT)
        assert line, "the sink closed stdout: %r" % self.proc.stderr.read()
        assert line.isascii() and line.endswith(b"\n")
        return json.loads(line)

    def request(self, **req) -> dict:
        req.setdefault("id", self._id())
        self.send_raw(json.dumps(req).encode() + b"\n")
        reply = self.reply()
        assert reply["id"] == req["id"]
        return reply

    def put(self, tmp, path, data: bytes, algo="sha256", digest: str | None = "auto", **extra) -> int:
        if digest == "auto":
            digest = hashlib.new(algo, data).hexdigest() if algo else None
        tmp, path = (p if p is None else str(p) for p in (tmp, path))
        head = {"op": "put", "id": self._id(), "tmp": tmp, "path": path, "size": len(data)}
        head.update({"mode": 0o644, "mtime": 1700000000.5, "algo": algo, "digest": digest}, **extra)
        self.send_raw(json.dumps(head).encode() + b"\n" + data)
        return head["id"]

    def commit(self, **req) -> dict:
        reply = self.request(op="commit", **req)
        assert reply["ok"] is True, reply
        return reply

    def close(self) -> int:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # the sink stopped reading on its own (a fatal request)
        code = self.proc.wait(timeout=REPLY_TIMEOUT)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


NAMED = {"AIRFLOW_TRANSFER_BUNDLE_TMPFILE": "0"}  # every put under a named temporary, as without O_TMPFILE


def _serving(env: dict[str, str] | None = None):
    s = Sink(env=env)
    yield s
    if s.proc.poll() is None:
        assert s.close() == 0


@pytest.fixture
def sink():
    yield from _serving()


@pytest.fixture
def named_sink():
    yield from _serving(NAMED)


def tmp_of(path: Path) -> Path:
    return path.with_name("." + path.name + ".atpart")


def _put_head(request_id: int, path: Path, data: bytes, claimed: bytes | None = None) -> dict:
    """A put request for `data` at `path` (its digest that of `claimed` when given: a mismatch)."""
    head = {"op": "put", "id": request_id, "tmp": str(tmp_of(path)), "path": str(path), "size": len(data)}
    digest = hashlib.sha256(data if claimed is None else claimed).hexdigest()
    head.update(mode=0o644, mtime=1.0, algo="sha256", digest=digest)
    return head


def _land(sink: bundle_sink.Sink, request_id: int, path: Path, data: bytes, claimed: bytes | None = None):
    """One put through an in-process sink's begin, feed and end, as the client lands a file."""
    put = sink.begin(_put_head(request_id, path, data, claimed))
    sink.feed(put, data)
    sink.end(put)
    return put


def leftovers(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".atpart"))


def test_hello_lists_algorithms_and_durability(sink: Sink) -> None:
    hello = sink.request(op="hello")
    assert hello["ok"] is True and hello["helper"] == "airflow-transfer-bundle" and hello["version"] == 3
    assert hello["ops"] == ["commit", "confine", "echo", "emit", "fail", "get", "hello", "put", "relay", "send"]
    assert set(hello["algorithms"]) == {"sha256", "sha1", "md5", "blake2b"}
    expected = "syncfs" if sys.platform.startswith("linux") else "fsync"
    assert hello["durability"] == expected
    assert isinstance(hello["max_pending"], int) and hello["max_pending"] >= 8


@pytest.mark.parametrize("naming", ["unnamed", "named"])
@pytest.mark.parametrize("sync", ["syncfs", "fsync"])
def test_group_of_200_small_files(tmp_path: Path, sync: str, naming: str) -> None:
    rng = random.Random(200)
    env = {"AIRFLOW_TRANSFER_BUNDLE_SYNC": sync, **(NAMED if naming == "named" else {})}
    sink = Sink(env=env, umask=0o022)
    assert sink.request(op="hello")["durability"] == sync
    # 0o664 and 0o666: bits the umask takes away at creation, which fchmod must put back
    modes = [0o644, 0o600, 0o755, 0o640, 0o444, 0o700, 0o664, 0o666]
    expect = {}
    for i in range(200):
        size = 0 if i % 37 == 0 else rng.randint(0, 64 * 1024)
        data = rng.randbytes(size)
        path = tmp_path / ("f%03d.bin" % i)
        mode, seconds = modes[i % len(modes)], 1600000000 + i
        ident = sink.put(tmp_of(path), path, data, mode=mode, mtime=seconds + 0.25)
        expect[ident] = (path, data, mode, seconds * 10**9 + 250_000_000)
    reply = sink.commit()
    assert reply["durability"] == sync
    assert [f["id"] for f in reply["files"]] == list(expect)
    for entry in reply["files"]:
        path, data, mode, mtime_ns = expect[entry["id"]]
        assert entry == {
            "id": entry["id"],
            "ok": True,
            "digest": hashlib.sha256(data).hexdigest(),
            "fsynced": True,
            "cache_dropped": True,
        }
        st = path.stat()  # before reading it here: the sink's read-back left the atime alone
        assert st.st_mode & 0o7777 == mode and st.st_mtime_ns == mtime_ns and st.st_atime_ns == mtime_ns
        assert path.read_bytes() == data
    assert any(not expect[f["id"]][1] for f in reply["files"])  # empty files were in the group
    assert leftovers(tmp_path) == [] and len(list(tmp_path.iterdir())) == 200
    assert sink.close() == 0


def test_every_stdlib_algorithm_and_a_large_file(sink: Sink, tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 7)  # more than one 1 MiB piece each way
    data += b'\n{"op": "commit", "id": 99}\n'  # file data is never read as a request
    ids = {}
    for algo in ("md5", "sha1", "sha256", "blake2b"):
        want = digest_bytes(algo, data)
        ids[sink.put(tmp_path / (".%s.atpart" % algo), tmp_path / algo, data, algo=algo, digest=want.upper())] = want
    reply = sink.commit()
    assert [(f["id"], f["ok"], f["digest"]) for f in reply["files"]] == [(i, True, d) for i, d in ids.items()]
    assert all((tmp_path / algo).read_bytes() == data for algo in ("md5", "blake2b"))


def test_mismatch_removes_the_file_and_leaves_the_final_name_alone(sink: Sink, tmp_path: Path) -> None:
    victim = tmp_path / "f2"
    victim.write_bytes(b"the previous, good version")
    os.utime(victim, (1000, 1000))
    datas = [b"zero", b"one", b"two", b"three", b""]
    ids = []
    for i, data in enumerate(datas):
        path = tmp_path / ("f%d" % i)
        digest = hashlib.sha256(b"not " + data).hexdigest() if i == 2 else "auto"
        ids.append(sink.put(tmp_of(path), path, data, digest=digest))
    files = sink.commit()["files"]
    assert [f["ok"] for f in files] == [True, True, False, True, True]
    bad = files[2]
    assert bad["id"] == ids[2] and bad["code"] == "EMISMATCH"
    assert bad["digest"] == hashlib.sha256(b"two").hexdigest()
    assert bad["expected"] == hashlib.sha256(b"not two").hexdigest()
    assert victim.read_bytes() == b"the previous, good version" and victim.stat().st_mtime == 1000
    assert [(tmp_path / ("f%d" % i)).read_bytes() for i in (0, 1, 3, 4)] == [b"zero", b"one", b"three", b""]
    assert leftovers(tmp_path) == []


def test_algo_null_renames_without_a_digest(sink: Sink, tmp_path: Path) -> None:
    path = tmp_path / "plain"
    ident = sink.put(tmp_of(path), path, b"no verification asked", algo=None, mode=0o600)
    [entry] = sink.commit()["files"]
    assert entry == {"id": ident, "ok": True, "digest": None, "fsynced": True, "cache_dropped": False}
    assert path.read_bytes() == b"no verification asked" and not tmp_of(path).exists()


def test_missing_directory_is_reported_and_the_stream_stays_framed(sink: Sink, tmp_path: Path) -> None:
    lost = tmp_path / "nope" / "f"
    good = tmp_path / "g"
    payload = b'{"op": "hello", "id": 5}\n' * 1000  # would answer if the sink lost its place
    first = sink.put(tmp_of(lost), lost, payload)
    second = sink.put(tmp_of(good), good, b"fine")
    files = sink.commit()["files"]
    assert [f["id"] for f in files] == [first, second]
    assert files[0]["ok"] is False and files[0]["code"] == "ENOENT" and str(lost.parent) in files[0]["error"]
    assert files[1]["ok"] is True and good.read_bytes() == b"fine"
    assert not lost.parent.exists()  # no directory is created
    assert sink.request(op="hello")["ok"] is True


@pytest.mark.parametrize("naming", ["unnamed", "named"])
def test_unsafe_paths_are_refused_and_nothing_is_written_outside(tmp_path: Path, naming: str) -> None:
    sink = Sink(env=NAMED if naming == "named" else None)
    d = tmp_path / "dest"
    other = tmp_path / "other"
    d.mkdir()
    other.mkdir()
    precious = other / "precious"
    precious.write_bytes(b"keep me")
    (d / ".link.atpart").symlink_to(precious)
    (d / ".dangling.atpart").symlink_to(other / "created-through-link")
    cases = [
        (f"{d}/sub/../.x.atpart", f"{d}/x"),  # ".."
        (f"{d}/../other/.x.atpart", f"{other}/x"),
        (".x.atpart", "x"),  # relative
        (f"{d}/.x.atpart", f"{other}/x"),  # different directories
        (f"{d}/x.atpart", f"{d}/x"),  # no leading dot
        (f"{d}/.x", f"{d}/.x"),  # same name
        (f"{d}//.x.atpart", f"{d}//x"),
        (f"{d}/.x.atpart/", f"{d}/x/"),
        (f"{d}/.x\0.atpart", f"{d}/x"),
        ("/.x.atpart", "/"),
        (f"{d}/.link.atpart", f"{d}/link"),  # a symlink at tmp is not followed
        (f"{d}/.dangling.atpart", f"{d}/dangling"),
        (None, f"{d}/x"),
    ]
    ids = [sink.put(tmp, path, b"attack " * 100) for tmp, path in cases]
    good = sink.put(tmp_of(d / "ok"), d / "ok", b"fine")
    files = sink.commit()["files"]
    assert sink.close() == 0
    assert [f["id"] for f in files] == ids + [good]
    assert files[-1]["ok"] is True
    assert precious.read_bytes() == b"keep me" and sorted(p.name for p in other.iterdir()) == ["precious"]
    assert (d / ".link.atpart").is_symlink() and (d / ".dangling.atpart").is_symlink()
    assert not Path("/x").exists() and not Path("/.x.atpart").exists()
    if naming == "named":
        assert [f.get("code") for f in files[:-1]] == ["EBADREQ"] * len(cases), files
        assert sorted(p.name for p in d.iterdir()) == [".dangling.atpart", ".link.atpart", "ok"]
        assert not (d / "link").exists()
        return
    # A file without a name never goes through its temporary name: a symbolic link there is
    # neither followed nor refused, and the file lands under its own name.
    landed = [i for i, (tmp, _) in enumerate(cases) if tmp in (f"{d}/.link.atpart", f"{d}/.dangling.atpart")]
    assert [f.get("code") for i, f in enumerate(files[:-1]) if i not in landed] == ["EBADREQ"] * (len(cases) - 2)
    assert [files[i]["ok"] for i in landed] == [True, True], files
    assert sorted(p.name for p in d.iterdir()) == [".dangling.atpart", ".link.atpart", "dangling", "link", "ok"]
    assert (d / "link").read_bytes() == (d / "dangling").read_bytes() == b"attack " * 100


def test_a_stale_temporary_is_replaced_not_written_through(named_sink: Sink, tmp_path: Path) -> None:
    sink = named_sink  # files without a name meet a stale temporary only over an existing file (below)
    path = tmp_path / "f"
    elsewhere = tmp_path / "hardlinked"
    elsewhere.write_bytes(b"another file's data")
    os.link(elsewhere, tmp_of(path))  # a temporary left by something else, sharing an inode
    sink.put(tmp_of(path), path, b"new")
    assert sink.commit()["files"][0]["ok"] is True
    assert path.read_bytes() == b"new" and elsewhere.read_bytes() == b"another file's data"


def test_same_tmp_twice_in_a_group_is_refused(sink: Sink, tmp_path: Path) -> None:
    path = tmp_path / "f"
    sink.put(tmp_of(path), path, b"first")
    sink.put(tmp_of(path), path, b"second")
    files = sink.commit()["files"]
    assert [f["ok"] for f in files] == [True, False] and files[1]["code"] == "EBADREQ"
    assert path.read_bytes() == b"first"


def test_names_shared_between_pending_puts_are_refused(sink: Sink, tmp_path: Path) -> None:
    a, dotted = tmp_path / "a", tmp_path / ".dotted"
    sink.put(tmp_of(a), a, b"a")
    sink.put(tmp_path / ".x", tmp_of(a), b"would land on a's tmp")  # path = a pending tmp
    sink.put(tmp_path / "..dotted.atpart", dotted, b"dotted")
    sink.put(dotted, tmp_path / "b", b"tmp = a pending path")
    files = sink.commit()["files"]
    assert [f.get("code") for f in files] == [None, "EBADREQ", None, "EBADREQ"]
    assert a.read_bytes() == b"a" and dotted.read_bytes() == b"dotted" and not (tmp_path / "b").exists()


def test_a_tmp_replaced_after_verification_is_not_renamed(named_sink: Sink, tmp_path: Path) -> None:
    sink = named_sink
    path = tmp_path / "f"
    sink.put(tmp_of(path), path, b"verified bytes")
    sink.request(op="hello")  # the put has been written once the sink answers what follows it
    intruder = tmp_path / "intruder"
    intruder.write_bytes(b"someone else's half-written file")
    os.replace(intruder, tmp_of(path))  # say a sink left over from a lost connection
    [entry] = sink.commit()["files"]
    assert entry["ok"] is False and entry["code"] == "ECHANGED"
    assert not path.exists() and tmp_of(path).read_bytes() == b"someone else's half-written file"


@pytest.mark.parametrize("naming", ["unnamed", "named"])
def test_a_verified_file_that_cannot_be_placed_is_removed(tmp_path: Path, naming: str) -> None:
    sink = Sink(env=NAMED if naming == "named" else None)
    path = tmp_path / "taken"
    (path / "child").mkdir(parents=True)  # a non-empty directory holds the final name
    sink.put(tmp_of(path), path, b"data")
    [entry] = sink.commit()["files"]
    assert entry["ok"] is False and entry["code"] in ("EISDIR", "ENOTEMPTY", "EEXIST")
    assert leftovers(tmp_path) == [] and (path / "child").is_dir()
    assert sink.close() == 0


def test_bad_requests_are_answered_and_the_sink_keeps_serving(sink: Sink, tmp_path: Path) -> None:
    sink.send_raw(b"{not json\n")
    bad = sink.reply()
    assert (bad["id"], bad["ok"], bad["code"]) == (None, False, "EBADREQ") and "not valid JSON" in bad["error"]
    sink.send_raw(b"[1, 2]\n\n   \n")
    assert sink.reply()["code"] == "EBADREQ"
    assert sink.request(op="frobnicate", id=7)["code"] == "EBADREQ"
    assert sink.request(op="hello", id="h")["id"] == "h"
    path = tmp_path / "f"
    ident = sink.put(tmp_of(path), path, b"data")
    refused = sink.request(op="commit", fsync="yes")
    assert refused["ok"] is False and refused["code"] == "EBADREQ"
    assert not path.exists()  # the pending put waits for a proper commit
    other = tmp_path / "g"
    whirl = sink.put(tmp_of(other), other, b"x", algo="whirlpool", digest="00")
    nodigest = sink.put(tmp_of(other), other, b"x", digest="not hex")
    badmode = sink.put(tmp_of(other), other, b"x", mode="0644")
    badtime = sink.put(tmp_of(other), other, b"x", mtime=float("nan"))
    files = sink.commit()["files"]
    assert [(f["id"], f["ok"], f.get("code")) for f in files] == [
        (ident, True, None),
        (whirl, False, "ENOALGO"),
        (nodigest, False, "EBADREQ"),
        (badmode, False, "EBADREQ"),
        (badtime, False, "EBADREQ"),
    ]
    assert path.read_bytes() == b"data" and not other.exists() and leftovers(tmp_path) == []


def test_unframed_put_is_fatal(sink: Sink, tmp_path: Path) -> None:
    head = {"op": "put", "id": 3, "tmp": str(tmp_path / ".f.atpart"), "path": str(tmp_path / "f"), "size": -1}
    sink.send_raw(json.dumps(head).encode() + b"\n" + b'{"op": "hello", "id": 4}\n')
    reply = sink.reply()
    assert reply["id"] == 3 and reply["code"] == "EBADREQ" and reply["fatal"] is True
    assert sink.close() == 2
    assert list(tmp_path.iterdir()) == []


def test_a_file_without_a_name_cannot_be_replaced_before_it_is_placed(sink: Sink, tmp_path: Path) -> None:
    """Its temporary name is not used: a file put there by someone else is left alone, and the
    verified bytes land under the final name."""
    path = tmp_path / "f"
    sink.put(tmp_of(path), path, b"verified bytes")
    sink.request(op="hello")  # the put has been written once the sink answers what follows it
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # written, and under no name yet
    intruder = tmp_path / "intruder"
    intruder.write_bytes(b"someone else's half-written file")
    os.replace(intruder, tmp_of(path))
    [entry] = sink.commit()["files"]
    assert entry["ok"] is True
    assert path.read_bytes() == b"verified bytes" and tmp_of(path).read_bytes() == b"someone else's half-written file"


def test_a_file_without_a_name_replaces_an_existing_file_and_a_stale_temporary(sink: Sink, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old version")
    elsewhere = tmp_path / "hardlinked"
    elsewhere.write_bytes(b"another file's data")
    os.link(elsewhere, tmp_of(path))  # a temporary left by something else, sharing an inode
    sink.put(tmp_of(path), path, b"new version", mode=0o640)
    [entry] = sink.commit()["files"]
    assert entry["ok"] is True
    assert path.read_bytes() == b"new version" and path.stat().st_mode & 0o7777 == 0o640
    assert elsewhere.read_bytes() == b"another file's data" and leftovers(tmp_path) == []


def test_without_proc_every_put_has_a_named_temporary(tmp_path: Path) -> None:
    """Where a file without a name could not be named (no /proc here, in a mount namespace of
    its own), the sink finds out once and uses named temporaries: nothing is lost."""
    wrap = ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    wrap += ["sh", "-c", 'umount -l /proc && exec "$@"', "sh"]
    sink = Sink(wrap=wrap)
    paths = [tmp_path / ("f%d" % i) for i in range(3)]
    for i, path in enumerate(paths):
        sink.put(tmp_of(path), path, b"file %d" % i, mode=0o664)
    sink.request(op="hello")
    assert sorted(p.name for p in tmp_path.iterdir()) == [tmp_of(p).name for p in paths]  # named
    files = sink.commit()["files"]
    assert [f["ok"] for f in files] == [True] * 3 and sink.close() == 0
    assert [p.read_bytes() for p in paths] == [b"file 0", b"file 1", b"file 2"]
    assert {p.stat().st_mode & 0o7777 for p in paths} == {0o664} and leftovers(tmp_path) == []


def test_eof_exits_zero_and_leaves_pending_temporaries(named_sink: Sink, tmp_path: Path) -> None:
    sink = named_sink
    pending, cut = tmp_path / "pending", tmp_path / "cut"
    sink.put(tmp_of(pending), pending, b"complete but uncommitted")
    head = {"op": "put", "id": 9, "tmp": str(tmp_of(cut)), "path": str(cut), "size": 100}
    head.update(mode=0o644, mtime=1.0, algo=None, digest=None)
    sink.send_raw(json.dumps(head).encode() + b"\n" + b"only part")
    assert sink.close() == 0
    assert tmp_of(pending).read_bytes() == b"complete but uncommitted" and not pending.exists()
    assert not tmp_of(cut).exists() and not cut.exists()


def test_eof_leaves_nothing_of_files_without_a_name(sink: Sink, tmp_path: Path) -> None:
    pending = tmp_path / "pending"
    sink.put(tmp_of(pending), pending, b"complete but uncommitted")
    assert sink.close() == 0
    assert list(tmp_path.iterdir()) == []


def test_empty_commit_and_no_fsync(sink: Sink, tmp_path: Path) -> None:
    assert sink.commit()["files"] == []
    path = tmp_path / "f"
    sink.put(tmp_of(path), path, b"quick")
    reply = sink.commit(fsync=False)
    assert reply["durability"] == "none"
    # Unflushed pages may be dirty, and DONTNEED leaves those: the read-back is not claimed to be from disk.
    assert reply["files"][0]["fsynced"] is False and reply["files"][0]["cache_dropped"] is False
    assert reply["files"][0]["digest"] == hashlib.sha256(b"quick").hexdigest() and path.read_bytes() == b"quick"


def test_group_bounded_by_the_fd_limit(tmp_path: Path) -> None:
    sink = Sink(fd_limit=64)
    limit = sink.request(op="hello")["max_pending"]
    assert limit == 32
    for i in range(limit + 5):
        path = tmp_path / ("f%d" % i)
        sink.put(tmp_of(path), path, b"%d" % i)
    files = sink.commit()["files"]
    assert [f["ok"] for f in files] == [True] * limit + [False] * 5
    assert {f["code"] for f in files[limit:]} == {"EMFILE"}
    assert len(list(tmp_path.iterdir())) == limit and leftovers(tmp_path) == []
    path = tmp_path / "after"
    sink.put(tmp_of(path), path, b"next group")
    assert sink.commit()["files"][0]["ok"] is True  # fds of the last group were all released
    assert sink.close() == 0


def test_requests_sent_with_the_source_in_one_write(tmp_path: Path) -> None:
    """What the bootstrap's readline buffered past the source is the start of the stream."""
    path = tmp_path / "f"
    head = {"op": "put", "id": 2, "tmp": str(tmp_of(path)), "path": str(path), "size": 5}
    head.update(mode=0o600, mtime=7.0, algo="sha1", digest=hashlib.sha1(b"hello").hexdigest())
    stdin = sink_preamble() + b'{"op":"hello","id":1}\n' + json.dumps(head).encode() + b"\nhello"
    stdin += b'{"op":"commit","id":3}\n'
    done = subprocess.run([PYTHON3, "-I", "-c", BOOT], input=stdin, capture_output=True, timeout=REPLY_TIMEOUT)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 3] and replies[1]["files"][0]["ok"] is True
    assert path.read_bytes() == b"hello"


def test_a_line_over_1_mib_is_fatal(sink: Sink) -> None:
    try:
        sink.send_raw(b'{"op": "hello", "id": "' + b"x" * (2 << 20))
    except BrokenPipeError:
        pass  # the sink stops reading after 1 MiB, as it should
    reply = sink.reply()
    assert reply["code"] == "EBADREQ" and reply["fatal"] is True and reply["id"] is None
    assert sink.close() == 2


def test_run_directly_as_a_script(tmp_path: Path) -> None:
    path = tmp_path / "f"
    head = {"op": "put", "id": 2, "tmp": str(tmp_of(path)), "path": str(path), "size": 3}
    head.update(mode=0o640, mtime=5.0, algo="md5", digest=hashlib.md5(b"abc").hexdigest())
    stdin = b'{"op": "hello", "id": 1}\n' + json.dumps(head).encode() + b"\nabc" + b'{"op": "commit", "id": 3}\n'
    done = subprocess.run([PYTHON3, str(SINK_FILE)], input=stdin, capture_output=True, timeout=REPLY_TIMEOUT)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 3] and replies[1]["files"][0]["ok"] is True
    assert path.read_bytes() == b"abc" and path.stat().st_mode & 0o777 == 0o640


def test_source_is_stdlib_only_and_python38_syntax() -> None:
    source = SINK_FILE.read_text(encoding="ascii")
    tree = ast.parse(source, feature_version=(3, 8))
    imports = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imports.add((node.module or "").split(".")[0])
    assert imports <= set(sys.stdlib_module_names) and not imports & {"subprocess", "shlex", "importlib"}
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"eval", "exec", "compile", "__import__"}


@pytest.mark.usefixtures("python38")
def test_python38_runs_a_group(tmp_path: Path) -> None:
    sink = Sink(python=PYTHON38)
    hello = sink.request(op="hello")
    assert hello["python"].startswith("3.8.") and "sha256" in hello["algorithms"]
    paths = [tmp_path / ("f%d" % i) for i in range(20)]
    for i, path in enumerate(paths):
        sink.put(tmp_of(path), path, b"x" * i * 100)
    assert all(f["ok"] and f["fsynced"] for f in sink.commit()["files"])
    assert [p.read_bytes() for p in paths] == [b"x" * i * 100 for i in range(20)]
    assert sink.close() == 0


def _gets(requests: list[dict], python: str = PYTHON3) -> list[tuple[dict, bytes]]:
    """Send hello and the gets in one write, then EOF; parse every reply (and its bytes)."""
    lines = [json.dumps({"op": "hello", "id": 0})] + [
        json.dumps(dict(r, op="get", id=i + 1)) for i, r in enumerate(requests)
    ]
    stdin = sink_preamble() + "".join(line + "\n" for line in lines).encode()
    proc = subprocess.run([python, "-I", "-c", BOOT], input=stdin, capture_output=True, timeout=REPLY_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    out, pos, replies = proc.stdout, 0, []
    while pos < len(out):
        end = out.index(b"\n", pos)
        head = json.loads(out[pos:end])
        size = head.get("size", 0) if head.get("ok") and head["id"] != 0 else 0
        replies.append((head, out[end + 1 : end + 1 + size]))
        pos = end + 1 + size
    assert replies[0][0]["helper"] == "airflow-transfer-bundle"
    return replies[1:]


def test_get_sends_each_file_with_its_digest_mode_and_mtime(tmp_path: Path) -> None:
    rng = random.Random(7)
    files = []
    for i, size in enumerate([0, 1, 10, 4096, 65536, 1 << 20, 3 * (1 << 20) + 5]):
        path = tmp_path / f"f{i}"
        path.write_bytes(rng.randbytes(size))
        os.chmod(path, [0o644, 0o600, 0o755][i % 3])
        os.utime(path, (1_700_000_000.25 + i, 1_700_000_000.25 + i))
        files.append(path)
    replies = _gets([{"path": str(p), "algo": "sha256"} for p in files])
    assert [h["id"] for h, _ in replies] == list(range(1, len(files) + 1))
    for path, (head, data) in zip(files, replies):
        assert head["ok"] is True and data == path.read_bytes() and head["size"] == len(data)
        assert head["digest"] == hashlib.sha256(data).hexdigest()
        assert head["mode"] == path.stat().st_mode & 0o7777 and head["mtime"] == path.stat().st_mtime


def test_get_refuses_what_it_must_not_read_and_keeps_serving(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"payload")
    (tmp_path / "link").symlink_to(good)
    (tmp_path / "dir").mkdir()
    replies = _gets(
        [
            {"path": str(tmp_path / "missing"), "algo": "sha256"},
            {"path": str(tmp_path / "link"), "algo": "sha256"},
            {"path": str(tmp_path / "dir"), "algo": "sha256"},
            {"path": "relative/name", "algo": "sha256"},
            {"path": str(tmp_path / ".." / tmp_path.name / "good"), "algo": "sha256"},
            {"path": str(good), "algo": "crc-nonsense"},
            {"path": str(good), "algo": None},
            {"path": str(good), "algo": "md5"},
        ]
    )
    codes = [h.get("code") for h, _ in replies]
    assert codes == ["ENOENT", "ELOOP", "EBADREQ", "EBADREQ", "EBADREQ", "ENOALGO", None, None], replies
    assert all(data == b"" for h, data in replies[:6])
    assert replies[6][0]["digest"] is None and replies[6][1] == b"payload"
    assert replies[7][0]["digest"] == hashlib.md5(b"payload").hexdigest() and replies[7][1] == b"payload"


@pytest.mark.usefixtures("python38")
def test_python38_serves_gets(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 5000)
    [(head, data)] = _gets([{"path": str(tmp_path / "f"), "algo": "blake2b"}], python=PYTHON38)
    assert data == b"x" * 5000 and head["digest"] == hashlib.blake2b(data).hexdigest()


class _CountingOut(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_a_group_of_gets_is_answered_in_one_flush_and_a_lone_get_at_once(tmp_path):
    for i in range(5):
        (tmp_path / f"g{i}").write_bytes(b"x" * (100 + i))
    gets = b"".join(
        json.dumps({"op": "get", "id": i, "path": str(tmp_path / f"g{i}"), "algo": "sha256"}).encode() + b"\n"
        for i in range(5)
    )
    out = _CountingOut()
    assert bundle_sink.Sink(io.BytesIO(gets), out).serve() == 0
    assert out.flushes == 1  # the five replies left together, when the requests ran out
    assert out.getvalue().count(b'"ok":true') == 5
    # A client that sends one get and waits for it is answered before the sink reads again.
    r, w = os.pipe()
    os.write(w, gets.split(b"\n")[0] + b"\n")
    out = _CountingOut()
    sink = bundle_sink.Sink(os.fdopen(r, "rb"), out)
    line = sink.line()
    sink.handle(line)
    assert out.flushes == 0
    os.close(w)
    assert sink.line() == b"" and out.flushes == 1 and b'"size":100' in out.getvalue()


def test_a_commit_drops_every_file_then_starts_every_read_before_reading_any(tmp_path, monkeypatch):
    calls: list[str] = []
    real_fadvise, real_pread = os.posix_fadvise, os.pread
    names = {os.POSIX_FADV_DONTNEED: "drop", os.POSIX_FADV_WILLNEED: "start"}

    def fadvise(fd, offset, length, advice):
        calls.append(names.get(advice, "other"))
        return real_fadvise(fd, offset, length, advice)

    def pread(fd, n, offset):
        got = real_pread(fd, n, offset)
        calls.append("read" if got else "read past the end")
        return got

    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    monkeypatch.setattr(os, "pread", pread)
    sink = bundle_sink.Sink()
    for i in range(3):
        _land(sink, i, tmp_path / f"f{i}", b"y" * (10 + i))
    reply = sink.commit({"fsync": True, "drop_cache": True})
    assert [f["ok"] for f in reply["files"]] == [True] * 3
    # One read per small file, none past its end; the pages read back are left cached, as a
    # written file's would be: no drop after the reads.
    assert calls == ["drop"] * 3 + ["start"] * 3 + ["read"] * 3, calls


def _put_frame(request_id: int, path: Path, data: bytes) -> bytes:
    return json.dumps(_put_head(request_id, path, data)).encode() + b"\n" + data


def test_the_next_group_is_written_while_a_commit_flushes_and_replies_keep_their_order(tmp_path, monkeypatch):
    """Serving a stream, a commit runs behind: the next group's files are created and written
    while the one before is still being made durable. The flush of group A here waits until
    group B's first temporary file exists; a sink that committed in line would never get there."""
    a, b = tmp_path / "a", tmp_path / "b"
    seen_while_flushing: list[bool] = []
    real_flush = bundle_sink.Sink._flush

    def waiting_flush(self, puts):
        if not seen_while_flushing:
            deadline = REPLY_TIMEOUT
            while not tmp_of(b).exists() and deadline > 0:
                threading.Event().wait(0.01)
                deadline -= 0.01
            seen_while_flushing.append(tmp_of(b).exists())
        return real_flush(self, puts)

    monkeypatch.setattr(bundle_sink.Sink, "_flush", waiting_flush)
    monkeypatch.setattr(bundle_sink, "UNNAMED", 0)  # group B's temporary name shows that it was created
    r, w = os.pipe()
    out = io.BytesIO()
    sink = bundle_sink.Sink(os.fdopen(r, "rb"), out)
    served: list[int] = []
    server = threading.Thread(target=lambda: served.append(sink.serve()))
    server.start()
    stream = _put_frame(2, a, b"group A") + b'{"op":"commit","id":3}\n' + _put_frame(4, b, b"group B")
    stream += b'{"op":"commit","id":5}\n{"op":"hello","id":6}\n'
    os.write(w, stream)
    os.close(w)
    server.join(timeout=REPLY_TIMEOUT)
    assert served == [0]
    assert seen_while_flushing == [True]
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [3, 5, 6]  # the hello waited for the commit still running
    assert [f["ok"] for r in replies[:2] for f in r["files"]] == [True, True]
    assert a.read_bytes() == b"group A" and b.read_bytes() == b"group B" and leftovers(tmp_path) == []


def test_only_the_flush_runs_behind_the_rest_of_a_commit_runs_on_the_serving_thread(tmp_path, monkeypatch):
    """A commit's flush waits on the kernel in a thread of its own; reading back, comparing and
    naming the files run on the thread that serves the stream, so that two threads never run
    Python per file at once. The stream stays open after the commit: its reply must come all
    the same (the client waits for it before sending more)."""
    where: dict[str, set[str]] = {"flush": set(), "verify": set(), "rename": set()}
    for step in ("flush", "verify", "rename"):
        real = getattr(bundle_sink.Sink, "_" + step)

        def spy(self, *args, _real=real, _step=step):
            where[_step].add(threading.current_thread().name)
            return _real(self, *args)

        monkeypatch.setattr(bundle_sink.Sink, "_" + step, spy)
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    sink = bundle_sink.Sink(os.fdopen(r, "rb"), os.fdopen(out_w, "wb"))
    served: list[int] = []
    server = threading.Thread(target=lambda: served.append(sink.serve()), name="serving")
    server.start()
    files = [tmp_path / ("f%d" % i) for i in range(3)]
    os.write(
        w, b"".join(_put_frame(i + 2, f, b"data %d" % i) for i, f in enumerate(files)) + b'{"op":"commit","id":9}\n'
    )
    replies = os.fdopen(out_r, "rb")
    reply = json.loads(replies.readline())  # the input is still open: the commit is answered anyway
    assert reply["id"] == 9 and [f["ok"] for f in reply["files"]] == [True, True, True]
    os.close(w)
    server.join(timeout=REPLY_TIMEOUT)
    assert served == [0]
    assert where["verify"] == where["rename"] == {"serving"}
    assert where["flush"] and "serving" not in where["flush"]
    assert [f.read_bytes() for f in files] == [b"data 0", b"data 1", b"data 2"]


def test_a_brief_commit_gives_placed_files_as_ids_and_reads_unnamed_ones_back_without_fstat(tmp_path, monkeypatch):
    """A brief reply: a placed file is its id, a refused one its whole entry. A file without a
    name is read back up to the bytes written (nobody else can open it): only the flush asks
    fstat, once for the directory's filesystem, however many files the group holds."""
    fstats: list[int] = []
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: fstats.append(fd) or real_fstat(fd))
    sink = bundle_sink.Sink()
    cases = [(b"one", b"one"), (b"two", b"two"), (b"three", b"other")]
    puts = [_land(sink, 10 + i, tmp_path / f"f{i}", data, claimed) for i, (data, claimed) in enumerate(cases)]
    assert all(put.unnamed for put in puts)  # this filesystem takes O_TMPFILE
    reply = sink.commit({"fsync": True, "drop_cache": True, "brief": True})
    assert reply["files"][:2] == [10, 11]
    refused = reply["files"][2]
    assert refused["id"] == 12 and refused["ok"] is False and refused["code"] == "EMISMATCH"
    assert len(fstats) == 1, fstats
    assert (tmp_path / "f0").read_bytes() == b"one" and not (tmp_path / "f2").exists()
    assert leftovers(tmp_path) == []


def test_a_put_naming_a_file_of_the_committing_group_waits_for_that_commit(tmp_path, monkeypatch):
    """The same name again right after its commit (a client retrying a file) is not touched
    while that commit still renames it: the put waits, then replaces the placed file."""
    path = tmp_path / "f"
    order: list[str] = []
    real_rename = bundle_sink.Sink._rename
    real_create = bundle_sink.Sink._create

    def rename(self, put):
        threading.Event().wait(0.2)  # a slow disk: the next put is read meanwhile
        order.append("rename")
        return real_rename(self, put)

    def create(self, put, request):
        real_create(self, put, request)
        order.append("create")  # once the file is created (after any wait)

    monkeypatch.setattr(bundle_sink.Sink, "_rename", rename)
    monkeypatch.setattr(bundle_sink.Sink, "_create", create)
    stream = _put_frame(2, path, b"first") + b'{"op":"commit","id":3}\n'
    stream += _put_frame(4, path, b"second") + b'{"op":"commit","id":5}\n'
    out = io.BytesIO()
    assert bundle_sink.Sink(io.BytesIO(stream), out).serve() == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [3, 5] and all(r["files"][0]["ok"] for r in replies)
    assert order == ["create", "rename", "create", "rename"]
    assert path.read_bytes() == b"second" and leftovers(tmp_path) == []


def test_the_sinks_path_rule_is_normpaths_over_every_short_path():
    # The sink tests names by their parts instead of calling normpath for each (twice per file):
    # over every string of up to 7 of the characters that matter, it accepts and splits exactly
    # what "absolute, no NUL, no '//', unchanged by normpath" accepts.
    def reference(value: str):
        if value[:1] != "/" or "\0" in value or "//" in value or os.path.normpath(value) != value:
            return None
        return os.path.split(value)

    checked = 0
    for length in range(8):
        for chars in itertools.product("/.a\0", repeat=length):
            value = "".join(chars)
            try:
                got = bundle_sink._split("path", value)
            except bundle_sink.RequestError:
                got = None
            assert got == reference(value), repr(value)
            checked += 1
    assert checked == sum(4**n for n in range(8))


def test_the_sinks_request_parser_agrees_with_json_loads_on_every_short_line():
    # Lines as the client writes them skip json.loads (the scanner reads them directly); every
    # other line falls back to it. Over every line of up to 5 of the characters that matter, and
    # a few longer ones, the sink takes exactly what json.loads takes, as the same object.
    def reference(line: bytes):
        try:
            got = json.loads(line)
        except ValueError:
            return "not JSON"
        return got if isinstance(got, dict) else "not an object"

    def parsed(line: bytes):
        try:
            return bundle_sink._request(line)
        except bundle_sink.RequestError as exc:
            return "not JSON" if "valid JSON" in str(exc) else "not an object"

    lines = [b'{"a":1}\n', b' {"a":1}\n', b'{"a":1}\r\n', b'{"a":1}{"b":2}\n', b'{"a":NaN}\n', b'{"a":1}\n\n']
    lines += [b'{"a":"\\ud800"}\n', b'{"a":"\xed\xa0\x80"}\n', b'\xef\xbb\xbf{"a":1}\n', b'{"a":[1,{"b":null}]}\n']
    for length in range(6):
        lines += [bytes(chars) for chars in itertools.product(b'{}":a1 \n\xff', repeat=length)]
    assert [parsed(line) for line in lines] == [reference(line) for line in lines]


@pytest.mark.parametrize(
    "fields",
    [
        dict(id=7, mac=None, tmp="/d/.a.atpart", path="/d/a", size=1024, mode=420, mtime=1795861320.123456),
        dict(id=8, mac="ab" * 32, tmp='/d/."q\\u.atpart', path='/d/"q\\u', size=0, mode=None, mtime=7),
        dict(id=9, mac=None, tmp="/d/.caf\udce9.atpart", path="/d/caf\udce9", size=3, mode=0o4755, mtime=-1.5),
        dict(id=10, mac=None, tmp="/d/.é\u2603\n.atpart", path="/d/é\u2603\n", size=3, mode=0, mtime=1e16),
        dict(id=11, mac=None, tmp=None, path=None, size=3, mode=1, mtime=0.0, algo=None, digest=None),
        # not as the client sends them: json.dumps writes these, whatever they hold
        dict(id=True, mac=None, tmp="/d/.a", path="/d/a", size=1, mode=420, mtime=1.0),
        dict(id=12, mac=None, tmp="/d/.a", path="/d/a", size=1, mode=420, mtime=float("nan")),
        dict(id=13, mac=None, tmp="/d/.a", path="/d/a", size=1, mode=420, mtime=float("inf")),
        dict(id=14, mac=None, tmp="/d/.a", path="/d/a", size=1, mode=4.0, mtime=1.0),
        dict(id=15, mac=3, tmp="/d/.a", path="/d/a", size=1, mode=420, mtime=1.0),
        dict(id="x", mac=None, tmp=["/d/.a"], path="/d/a", size=1, mode=420, mtime=1.0),
    ],
)
def test_a_put_header_is_the_line_json_dumps_writes(fields, monkeypatch):
    # The helper reading files writes a put header per file, formatted directly where its
    # fields are as the client sends them; byte for byte what json.dumps of the dict gives.
    head = dict(op="put", id=fields["id"], mac=fields["mac"], tmp=fields["tmp"], path=fields["path"])
    head.update(size=fields["size"], mode=fields["mode"], mtime=fields["mtime"])
    head.update(algo=fields.get("algo", "sha256"), digest=fields.get("digest", "ab" * 32))
    want = bundle_sink._line(head)
    dumped: list[dict] = []
    monkeypatch.setattr(bundle_sink, "_line", lambda obj: dumped.append(obj) or want)
    assert bundle_sink._put_fields(*(head[k] for k in bundle_sink._PUT_KEYS)) == want
    as_sent = type(head["id"]) is int and head["id"] < 12  # the first five cases
    assert dumped == ([] if as_sent else [head])


def _fed(requests: list[dict], python: str = PYTHON3, confine: dict | None = None) -> list[dict]:
    """A download's two helpers, for real: one serving `requests` as the source's does (its
    output captured whole), then that output served by a second as the lander's input (told
    `confine` first, as the client does); the lander's replies."""
    lines = "".join(json.dumps(r) + "\n" for r in requests).encode()
    fed = subprocess.run([python, "-I", "-c", BOOT], input=sink_preamble() + lines, capture_output=True, timeout=60)
    assert fed.returncode == 0, fed.stderr
    out = io.BytesIO()
    lander = bundle_sink.Sink(io.BufferedReader(io.BytesIO(fed.stdout)), out)
    if confine is not None:
        assert lander.handle(json.dumps(dict(confine, op="confine", id=0)).encode() + b"\n")["ok"] is True
    assert lander.serve() == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_source_helper_feeds_the_lander_files_and_failures_in_one_commit(tmp_path: Path) -> None:
    _feeds_the_lander(tmp_path, PYTHON3)


@pytest.mark.usefixtures("python38")
def test_python38_feeds_the_lander(tmp_path: Path) -> None:
    _feeds_the_lander(tmp_path, PYTHON38)


def _feeds_the_lander(tmp_path: Path, python: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    payload = random.Random(3).randbytes(3000)
    for name, data in (("a", payload), ("empty", b""), ("grown", b"x" * 10), ("touched", b"y" * 10)):
        (src / name).write_bytes(data)
        os.utime(src / name, (1_700_000_000.5, 1_700_000_000.5))
    os.chmod(src / "a", 0o640)
    (src / "link").symlink_to(src / "a")

    def send(i: int, name: str, size: int, mtime: float = 1_700_000_000.5) -> dict:
        return {
            "op": "send", "id": i, "path": str(src / name), "size": size, "mtime": mtime, "mode": 0o640,
            "algo": "sha256", "tmp": str(dst / f".{name}.part"), "dst": str(dst / name),
        }  # fmt: skip

    replies = _fed(
        python=python,
        requests=[
            {"op": "relay", "id": 1},
            send(2, "a", 3000),
            send(3, "empty", 0),
            send(4, "missing", 5),
            send(5, "grown", 4),  # listed smaller than it is now
            send(6, "touched", 10, mtime=1_600_000_000.5),  # listed with another mtime
            send(7, "link", 3000),  # a symlink is not followed
            {"op": "emit", "id": 8, "line": {"op": "commit", "id": 9, "fsync": True, "drop_cache": True}},
            {"op": "get", "id": 10, "path": "not absolute"},  # the source's own error, echoed
        ],
    )
    assert replies[0] == {"id": 1, "ok": True}  # the source's reply, echoed by the lander
    commit = replies[1]
    assert commit["id"] == 9 and commit["ok"] is True and commit["bytes"] == 3000 and commit["seconds"] >= 0
    files = {f["id"]: f for f in commit["files"]}
    assert files[2]["ok"] and files[2]["digest"] == hashlib.sha256(payload).hexdigest() and files[3]["ok"]
    codes = {i: (files[i].get("code"), files[i].get("source")) for i in (4, 5, 6, 7)}
    assert codes == {4: ("ENOENT", True), 5: ("ECHANGED", True), 6: ("ECHANGED", True), 7: ("ELOOP", True)}
    assert replies[2]["id"] == 10 and replies[2]["code"] == "EBADREQ" and len(replies) == 3
    assert (dst / "a").read_bytes() == payload and (dst / "empty").read_bytes() == b""
    st = (dst / "a").stat()
    assert st.st_mode & 0o7777 == 0o640 and st.st_mtime == 1_700_000_000.5
    assert sorted(p.name for p in dst.iterdir()) == ["a", "empty"]  # nothing else, no temporary left


def test_a_fail_request_is_reported_at_its_place_in_the_commit(sink: Sink, tmp_path: Path) -> None:
    sink.put(tmp_of(tmp_path / "one"), tmp_path / "one", b"1")
    sink.send_raw(
        json.dumps({"op": "fail", "id": 99, "code": "ENOENT", "error": "gone at the source"}).encode() + b"\n"
    )
    sink.put(tmp_of(tmp_path / "two"), tmp_path / "two", b"2")
    files = sink.commit()["files"]
    assert [f["ok"] for f in files] == [True, False, True]
    assert files[1]["code"] == "ENOENT" and files[1]["source"] is True and files[1]["error"] == "gone at the source"


def test_a_confined_lander_places_only_what_the_client_asked_for_under_its_root(tmp_path: Path) -> None:
    """What the server's helper writes is the lander's input: it must not be able to place a
    file the client did not ask for, elsewhere, or under another name (each put carries the
    client's mac of its id and names, under a key the server never sees)."""
    from airflow_transfer.engine.bundle_channel import put_mac

    src, root, outside = tmp_path / "src", tmp_path / "root", tmp_path / "outside"
    for d in (src, root, outside):
        d.mkdir()
    (src / "a").write_bytes(b"asked for")
    key = os.urandom(32)

    def forged(i: int, path: Path, mac: str | None) -> dict:
        put = {"op": "put", "id": i, "tmp": str(path.parent / f".{path.name}.p"), "path": str(path), "size": 0}
        put.update(mode=0o644, mtime=1.0, algo=None, digest=None, mac=mac)
        return {"op": "emit", "id": 90 + i, "line": put}

    good_tmp, good = str(root / ".a.p"), str(root / "a")
    replies = _fed(
        confine={"root": str(root), "key": key.hex()},
        requests=[
            {"op": "relay", "id": 1},
            {
                "op": "send",
                "id": 2,
                "path": str(src / "a"),
                "size": 9,
                "mtime": (src / "a").stat().st_mtime,
                "mode": 0o644,
                "algo": "sha256",
                "tmp": good_tmp,
                "dst": good,
                "mac": put_mac(key, 2, good_tmp, good),
            },  # fmt: skip
            forged(3, outside / "evil", put_mac(key, 3, str(outside / ".evil.p"), str(outside / "evil"))),
            forged(4, root / "unasked", None),
            forged(5, root / "renamed", put_mac(key, 2, good_tmp, good)),  # a mac for another file
            {"op": "emit", "id": 6, "line": {"op": "confine", "id": 7, "root": "/", "key": "00" * 32}},
            {"op": "emit", "id": 8, "line": {"op": "commit", "id": 9, "fsync": True, "drop_cache": True}},
        ],
    )
    assert replies[0] == {"id": 1, "ok": True}
    assert replies[1]["id"] == 7 and replies[1]["code"] == "EBADREQ"  # the root cannot be changed from the stream
    files = replies[2]["files"]
    assert [f["id"] for f in files] == [2, 3, 4, 5]
    assert files[0]["ok"] is True and files[0]["path"] == good
    assert [f.get("code") for f in files[1:]] == ["EBADREQ"] * 3
    assert "outside the destination root" in files[1]["error"] and "did not ask for" in files[2]["error"]
    assert sorted(p.name for p in root.iterdir()) == ["a"] and list(outside.iterdir()) == []


def test_confine_takes_a_key_that_keyed_blake2b_can_use(tmp_path: Path) -> None:
    # The mac is BLAKE2b in its keyed mode, whose key holds at most 64 bytes: a key it could not
    # use is refused at confine, not at each put after it.
    for size, ok in ((15, False), (16, True), (64, True), (65, False)):
        sink = bundle_sink.Sink()
        reply = sink.handle(json.dumps({"op": "confine", "id": 1, "root": str(tmp_path), "key": "ab" * size}).encode())
        assert reply["ok"] is ok, (size, reply)
