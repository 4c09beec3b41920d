"""The command line's rough edges: mistyped URLs, --json on failure, list --out, plan's knobs and
JSON, profile's exit status, the progress line, the ETA, and a verifier outliving its journal."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_transfer import cli, cmd_profile
from airflow_transfer import manifest_schema as ms
from airflow_transfer.engine.accounting import Stats, _eta, format_line, format_rate, plural
from airflow_transfer.engine.verify import DestinationDigests, Piece, Verifier, VerifyItem
from airflow_transfer.integrity.algorithms import digest_file
from airflow_transfer.store import open_store
from tests.support.cli import run_cli, ssh_args
from tests.support.hostile_sftp import Behaviour, HostileSFTPServer
from tests.support.sshd import free_port


def _one_error_line(res) -> str:
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1, res.err
    assert lines[0].startswith("airflow-transfer: error: "), res.err
    assert "Traceback" not in res.err
    return lines[0]


def _one_json(res) -> dict:
    objects = [line for line in res.out.splitlines() if line.strip()]
    assert len(objects) == 1, res.out
    return json.loads(objects[0])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("hello\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(3000))
    return src


# -- 1. mistyped URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dst,needles",
    [
        ("sftp:/someone@example.invalid:2222/srv/x", ("malformed URL", "sftp://someone@example.invalid:2222/srv/x")),
        ("sftp:someone@example.invalid/x", ("malformed URL", "sftp://someone@example.invalid/x")),
        ("sfpt://someone@example.invalid/srv/x", ("unknown URL scheme 'sfpt'", "did you mean sftp://")),
        ("someone@example.invalid:/srv/x", ("scp-style", "sftp://someone@example.invalid/srv/x")),
    ],
)
def test_mistyped_url_is_a_usage_error_and_creates_nothing(data, tmp_path, monkeypatch, dst, needles):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    res = run_cli("copy", str(data), dst)
    line = _one_error_line(res)
    assert res.code == 2
    for needle in needles:
        assert needle in line, line
    if "://" not in dst:
        assert "./" + dst in line  # the way to mean a local name of that shape
    assert list(work.iterdir()) == []  # no local folder named "sftp:" (or anything else)


def test_a_local_name_with_a_colon_is_reachable_as_dot_slash(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run_cli("copy", str(data), "./sftp:odd")
    assert res.code == 0, res.err
    assert (tmp_path / "sftp:odd" / "a.txt").read_text() == "hello\n"


# -- 2. missing parents of the destination root --------------------------------------------------


def test_missing_local_parents_of_dst_are_created(sshd, remote_dir, tmp_path):
    (remote_dir / "a.txt").write_text("x\n")
    os.chmod(remote_dir / "a.txt", 0o644)
    dst = tmp_path / "p" / "q" / "r"
    res = run_cli("copy", sshd.url(str(remote_dir)), str(dst), *ssh_args(sshd))
    assert res.code == 0, res.err
    assert (dst / "a.txt").read_text() == "x\n"


def test_missing_remote_parents_of_dst_are_created(data, sshd, remote_dir):
    res = run_cli("copy", str(data), sshd.url(f"{remote_dir}/p/q/r"), *ssh_args(sshd))
    assert res.code == 0, res.err
    assert (remote_dir / "p" / "q" / "r" / "a.txt").read_text() == "hello\n"


# -- 3. list --out ----------------------------------------------------------------------------------


def test_list_out_creates_missing_parent_directories(data, tmp_path):
    out = tmp_path / "missing" / "dir" / "m.parquet"
    res = run_cli("list", str(data), "--out", str(out), "--json")
    assert res.code == 0, res.err
    assert "Traceback" not in res.err
    assert _one_json(res)["files"] == 2
    assert out.is_file()


@pytest.mark.parametrize("trailing", ["", "/"])
def test_list_out_naming_a_directory_is_one_line_and_leaves_nothing(data, tmp_path, trailing):
    target = tmp_path / "existing"
    target.mkdir()
    res = run_cli("list", str(data), "--out", str(target) + trailing)
    assert res.code == 2
    assert "--out names a directory" in _one_error_line(res)
    assert list(target.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "existing"]  # no existing.tmp


def test_list_out_unwritable_is_one_line_and_leaves_no_temporary(data):
    res = run_cli("list", str(data), "--out", "/proc/m.parquet")
    assert res.code == 1
    assert "cannot" in _one_error_line(res)
    assert not Path("/proc/m.parquet.tmp").exists()


# -- 4. --json when the command fails ---------------------------------------------------------------


class _ResetServer:
    """Accepts, reads the client's SSH banner line, then resets the connection (an SSH port behind a
    middlebox that drops the session, a server that crashes on accept)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(10)
            buf = b""
            try:
                while b"\n" not in buf:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    buf += chunk
            except OSError:
                pass
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def reset_server():
    server = _ResetServer()
    yield server
    server.close()


def _failed_json(res, kind: str, code: int) -> dict:
    obj = _one_json(res)
    assert res.code == code, res.err
    assert obj["failed"] and obj["failed"][0]["path"] == ""
    assert obj["error"]["type"] == kind, obj
    assert obj["error"]["exit_code"] == code
    assert obj["error"]["message"] in res.err
    return obj


def test_json_on_unreachable_host(data, sshd):
    res = run_cli("copy", str(data), f"sftp://{sshd.user}@127.0.0.1:{free_port()}/tmp/x", *ssh_args(sshd), "--json")
    obj = _failed_json(res, "connect", 1)
    assert obj["files"] == 0 and obj["bytes_moved"] == 0 and obj["src"] == str(data)  # the copy summary's keys


def test_json_on_refused_login(data, sshd, remote_dir):
    res = run_cli(
        "copy",
        str(data),
        sshd.url(f"{remote_dir}/dst"),
        "--identity",
        str(sshd.other_key),
        "--known-hosts",
        str(sshd.known_hosts),
        "--json",
    )
    _failed_json(res, "auth", 1)


def test_json_on_unknown_host_key(data, sshd, remote_dir, tmp_path):
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    args = ["--identity", str(sshd.client_key), "--known-hosts", str(empty), "--json"]
    res = run_cli("copy", str(data), sshd.url(f"{remote_dir}/dst"), *args)
    _failed_json(res, "host_key", 1)


def test_json_on_missing_source(sshd, remote_dir, tmp_path):
    res = run_cli("copy", str(tmp_path / "nope"), sshd.url(f"{remote_dir}/dst"), *ssh_args(sshd), "--json")
    obj = _failed_json(res, "transfer", 1)
    assert "source does not exist" in obj["error"]["what"]


@pytest.mark.parametrize(
    "args", [["--pp", "0"], ["--algorithm", "nope"], ["--verify", "md4"]], ids=["knob", "argparse", "verify"]
)
def test_json_on_usage_errors(data, tmp_path, args):
    res = run_cli("copy", str(data), str(tmp_path / "dst"), *args, "--json")
    _failed_json(res, "usage", 2)


def test_json_on_other_commands(tmp_path):
    res = run_cli("list", str(tmp_path / "nope"), "--out", str(tmp_path / "m.parquet"), "--json")
    _failed_json(res, "transfer", 1)


# -- 5. profile ------------------------------------------------------------------------------------------


def test_profile_of_a_missing_directory_names_the_real_way(tmp_path):
    res = run_cli("profile", str(tmp_path / "nope"), "--quick", "--json")
    line = _one_error_line(res)
    assert res.code == 2
    assert "--path" not in line
    assert "as HOST" in line and str(tmp_path / "nope") in line
    assert _one_json(res)["error"]["type"] == "usage"


def test_profile_that_failed_exits_non_zero():
    """/proc takes no files, even from root: the disk profile fails, memory and kernel succeed."""
    res = run_cli("profile", "/proc", "--quick", "--json")
    assert res.code == 1, res.err
    obj = _one_json(res)
    assert obj["hosts"]["localhost"]["memory"]["ok"] and not obj["hosts"]["localhost"]["disk"]["ok"]
    assert [(f["host"], f["profile"]) for f in obj["failed"]] == [("localhost", "disk")]
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("airflow-transfer: error: the disk profile of localhost failed") and "--path" not in last


def test_profile_progress_shows_rates_without_exponents():
    line = "localhost -> host:2222: RTT 0.05 ms, bandwidth 5.267e+04 Mbit/s (direct)"
    assert cmd_profile.readable_figures(line) == "localhost -> host:2222: RTT 0.05 ms, bandwidth 52,670 Mbit/s (direct)"


# -- 6 and 7. plan ------------------------------------------------------------------------------------


def test_plan_json_decision_is_an_object(data):
    res = run_cli("plan", str(data), "--json")
    assert res.code == 0, res.err
    decision = _one_json(res)["decision"]
    assert isinstance(decision, dict) and set(decision) == {"algorithm", "reason"}
    assert decision["algorithm"] and decision["reason"]


@pytest.mark.parametrize(
    "args,algorithm,knobs",
    [
        (["--algorithm", "fixed"], "fixed", (8, 1, 4)),
        (["-c", "2"], "fixed", (8, 1, 2)),
        (["--pp", "3", "-p", "2"], "fixed", (3, 2, 4)),
    ],
)
def test_plan_takes_copys_knobs_and_defaults(data, args, algorithm, knobs):
    res = run_cli("plan", str(data), *args, "--json")
    assert res.code == 0, res.err
    plan = _one_json(res)
    assert plan["algorithm"] == algorithm
    assert {(c["params"]["pp"], c["params"]["p"], c["params"]["cc"]) for c in plan["chunks"]} == {knobs}


def test_plan_and_copy_share_one_definition_of_the_knobs():
    def options(command: str) -> dict:
        sub = next(a for a in cli._parser()._actions if a.dest == "command").choices[command]
        return {a.dest: (tuple(a.option_strings), a.default, a.choices, a.help) for a in sub._actions}

    copy, plan = options("copy"), options("plan")
    for dest in ("algorithm", "pp", "parallelism", "concurrency", "rtt_ms", "bandwidth_mbit", "bdp"):
        assert copy[dest] == plan[dest], dest


# -- 8. progress and summary lines -------------------------------------------------------------------


def test_plural():
    assert [plural(n, "chunk") for n in (0, 1, 2)] == ["0 chunks", "1 chunk", "2 chunks"]


def test_plan_says_1_chunk(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "f").write_bytes(b"x" * 10)
    res = run_cli("plan", str(tmp_path / "one"), "--algorithm", "fixed")
    assert res.code == 0, res.err
    assert "fixed: 1 file, 10 bytes, 1 chunk (" in res.err


def test_rates_have_no_exponent():
    assert format_rate(52670.0) == "52,670 Mbit/s"
    assert format_rate(948.64) == "949 Mbit/s"
    assert format_rate(12.34) == "12.3 Mbit/s"
    snap = Stats(1, 1000).snapshot()
    snap["rate_mbit"] = 52670.0
    assert "52,670 Mbit/s" in format_line(snap) and "e+" not in format_line(snap)


def test_progress_never_passes_100_percent():
    stats = Stats(2, 1000)
    stats.add_bytes(1500)  # bytes sent again after a failed check
    stats.file_finished(True)
    stats.file_finished(True)
    stats.file_finished(True)
    line = format_line(stats.snapshot())
    assert "(100%)" in line and "2/2 files" in line and "1000 B/1000 B" in line


def test_progress_is_not_100_percent_before_the_last_byte():
    stats = Stats(1, 1000)
    stats.add_bytes(999)
    assert "(99%)" in format_line(stats.snapshot())


def test_skipped_bytes_count_as_progress_but_not_as_rate():
    stats = Stats(2, 2_000_000)
    stats.add_skipped_bytes(2_000_000)
    stats.file_finished(True, skipped=True)
    stats.file_finished(True, skipped=True)
    snap = stats.snapshot()
    assert snap["rate_mbit"] == 0.0 and snap["avg_mbit"] == 0.0
    assert "(100%)" in format_line(snap)


def test_all_skipped_rerun_shows_no_rate(data, tmp_path):
    dst = tmp_path / "dst"
    assert run_cli("copy", str(data), str(dst), "--verify", "none").code == 0
    res = run_cli("copy", str(data), str(dst), "--verify", "none", "--progress-interval", "60", "--json")
    assert res.code == 0 and _one_json(res)["files_skipped"] == 2
    progress = [line for line in res.err.splitlines() if "ETA" in line]
    assert progress and all(" 0.0 Mbit/s" in line for line in progress), res.err


def test_ssh_banner_reset_reads_as_a_sentence(data, reset_server):
    res = run_cli("copy", str(data), f"sftp://someone@127.0.0.1:{reset_server.port}/tmp/x", "--json")
    line = _one_error_line(res)
    assert "connection reset while reading the SSH banner (errno 104)" in line, line
    assert "banner[" not in line
    assert _one_json(res)["error"]["what"].endswith("connection reset while reading the SSH banner (errno 104)")


def test_interrupt_message_starts_its_own_line(tmp_path):
    """On a terminal the progress line is redrawn in place; Ctrl-C's message must not be glued to it.
    The server never answers a read, so the copy is still running when the signal comes."""
    served = tmp_path / "served"
    (served / "data").mkdir(parents=True)
    (served / "data" / "a.bin").write_bytes(os.urandom(200_000))
    with HostileSFTPServer(tmp_path / "keys", served, Behaviour(stall_after_reads=0)) as server:
        master, slave = os.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_transfer.cli", "copy", server.url("/data"), str(tmp_path / "dst")]
            + [*server.cli_args(), "--verify", "none", "--progress-interval", "0.2", "--algorithm", "fixed"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            # A shell that started the tests in the background ignores SIGINT; the copy must not.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        os.close(slave)
        seen = b""

        def read() -> bytes:
            ready, _, _ = select.select([master], [], [], 120)  # a guard against a hang, not a timing
            assert ready, seen
            try:
                return os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                return b""

        try:
            while b"ETA" not in seen:
                chunk = read()
                assert chunk, seen
                seen += chunk
            proc.send_signal(signal.SIGINT)
            while chunk := read():
                seen += chunk
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
    text = seen.decode("utf-8", "replace")
    assert proc.returncode == 130, text
    at = text.index("airflow-transfer: interrupted")
    assert text[at - 1] == "\n", repr(text[max(0, at - 80) : at + 40])


# -- 9. a verifier whose journal is closed ----------------------------------------------------------------


def test_verifier_ends_quietly_when_the_journal_closed_under_it(tmp_path, monkeypatch):
    """Ctrl-C during a download: the copy closes its journal, then stops the verifier, which may be
    handing over a verdict meanwhile. That verdict has nowhere to go; no thread may die of it."""
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(100_000))
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    record = store.begin_transfer("edges-verify", str(path), str(tmp_path / "dst"))
    store.record_listing(record.id, pa.table({ms.PATH: ["f.bin"], ms.SIZE: [100_000], ms.MTIME: [0.0]}, ms.SCHEMA))
    journal = store.journal_writer(record.id)
    journal.close()  # what job.py does first when the copy unwinds

    died: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: died.append(hook.exc_value))
    verdicts = []

    def on_verdict(item, ok, error):
        verdicts.append(ok)
        journal.mark_done("f.bin", 100_000, 0.0)  # what finishing a verified file does

    verifier = Verifier(DestinationDigests("sha256"), on_verdict).start()
    try:
        digest = digest_file("sha256", str(path))
        verifier.submit(VerifyItem(0, str(path), [Piece(0, 100_000, digest)]))
        verifier.submit(VerifyItem(1, str(path), [Piece(0, 100_000, digest)]))
        deadline = time.monotonic() + 30
        while verifier._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        verifier.stop()
        store.close()
    assert died == []
    assert verdicts == [True]  # the first verdict reached the copy; the queued one was dropped
    assert verifier.abandoned is not None and "closed" in str(verifier.abandoned)


# -- 10. the ETA --------------------------------------------------------------------------------------------


def test_eta_waits_while_only_small_files_have_moved():
    """1000 files: 999 of 1 KiB, then one of 1 GiB. After the small ones the byte rate says
    nothing about the large one: no ETA rather than hours."""
    stats = Stats(1000, 999 * 1024 + (1 << 30))
    for _ in range(999):
        stats.add_bytes(1024)
        stats.file_finished(True)
    assert stats.snapshot()["eta_s"] is None
    assert "ETA --" in format_line(stats.snapshot())


def test_eta_appears_once_enough_bytes_moved():
    stats = Stats(10, 10_000_000)
    stats.add_bytes(5_000_000)
    for _ in range(5):
        stats.file_finished(True)
    time.sleep(0.01)  # some time must have passed for any rate: the value itself is not checked
    eta = stats.snapshot()["eta_s"]
    assert eta is not None and eta >= 0


def test_eta_takes_the_larger_of_the_byte_and_the_file_estimates():
    # Multi-Chunk: a large file sets the byte rate while 200 small files wait in another chunk.
    knobs = {"pp": "2/33", "cc": "1/2"}  # 2 + 66 files under way at most
    assert _eta(50, 100, rate=10.0, files_left=200, file_rate=4.0, params=knobs) == (200 - 68) / 4.0
    # The tail of a copy of large files: seven left, all under way; the bytes tell.
    assert _eta(470, 488, rate=100.0, files_left=7, file_rate=0.3, params={"pp": 8, "cc": 4}) == 18 / 100.0
    # No file finished lately: the files are large, the file rate says nothing.
    assert _eta(50, 100, rate=10.0, files_left=1, file_rate=0.0, params={}) == 5.0
    assert _eta(50, 100, rate=0.0, files_left=1, file_rate=0.0, params={}) is None  # stalled


def test_eta_is_zero_when_everything_is_there():
    stats = Stats(1, 10)
    stats.add_bytes(10)
    stats.file_finished(True)
    assert stats.snapshot()["eta_s"] == 0.0


# -- 11. make demo ----------------------------------------------------------------------------------------


def test_demo_shows_task_log_lines_from_their_start():
    """`make demo` printed the last 200 characters of each task log line: the first one lost its
    timestamp mid-number (".659247Z [info ] 303/303 files ...")."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo", Path(__file__).resolve().parents[1] / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    message = "303/303 files, 77.9 MiB/77.9 MiB (100%), 375 Mbit/s, ETA 0:00 pp=33 p=1 cc=2"
    logged = (
        f"2026-11-25T23:47:17.659247Z [info     ] {message} "
        "[airflow.task.operators.airflow_transfer.operators.transfer.TunedTransferOperator] loc=transfer.py:181"
    )
    assert len(logged) > 200
    assert demo._shown(logged) == f"2026-11-25T23:47:17.659247Z [info     ] {message}"
    assert demo._shown("x" * 300).startswith("xxx") and demo._shown("x" * 300).endswith(" ...")


def test_the_command_line_keeps_numpy_from_starting_blas_threads():
    """NumPy's BLAS starts a spinning thread per extra core at import; the command line sets
    OPENBLAS_NUM_THREADS=1 (unless the user set it) before anything loads NumPy."""
    code = (
        "import os, airflow_transfer.cli, numpy;"
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"], out.stdout
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "2", out.stdout
