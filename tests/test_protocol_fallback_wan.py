"""Paper 003 experiment 1, small: sftp preferred, ftp alternate, over the emulated wan50 link.

The CLI runs in the src namespace; sshd and an FTP server (both as the same
login user, so each can continue the other's temporary files) run in dst. The
test stops sshd twice mid-run and starts it again each time; the copy must
switch to ftp and back to sftp twice, finish every file byte-identical and
verified, and send no file twice in full.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.data import tree_digest, write_random
from tests.support.servers import FTPServer
from tests.support.wan import REPO_ROOT, wan_testbed  # noqa: F401  (fixture)

FILES = 300


def _done(root: Path) -> int:
    return sum(1 for _, _, names in os.walk(root) for n in names if not n.startswith("."))


def _touched(root: Path) -> int:
    """Files finished or begun (temporary names): sftp uploads well ahead of its verification."""
    return sum(len(names) for _, _, names in os.walk(root))


def _ftp_only(root: Path, sshd) -> set[str]:
    """Finished files whose temporary name sftp never opened."""
    opened = {os.path.basename(p) for _, op, p in sshd.sftp_events() if op == "open"}
    return {n for _, _, names in os.walk(root) for n in names if not n.startswith(".") and f".{n}.atpart" not in opened}


def _notes(err: list[str]) -> str:
    """stderr without the progress lines."""
    return "".join(e for e in err if "ETA" not in e)[-6000:]


def _wait(cond, timeout: float, what: str, proc: subprocess.Popen, err: list[str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc.poll() is not None:
            raise AssertionError(f"copy ended before {what}:\n" + _notes(err))
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)  # the copy dumps its threads' stacks to stderr
    time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}:\n" + _notes(err))


def test_experiment1_two_outages_two_switches_each_way(wan_testbed):
    tb = wan_testbed(rtt_ms=50, rate_mbit=500)
    rng = random.Random(3)
    src = tb.base / "src"
    for i in range(FILES):
        write_random(src / f"d{i % 5}" / f"f{i:03d}.bin", rng.randint(256 * 1024, 512 * 1024), seed=i)
    for d in [src, *src.iterdir()]:
        os.chmod(d, 0o755)
    dst = tb.remote_dir("exp1")
    ftp = FTPServer(root="/", host=tb.link.dst_addr, port=2121, netns=tb.link.dst_ns, run_as=tb.sshd.user).start(
        netrc_dir=tb.base
    )
    try:
        sshd = tb.sshd
        boot = (
            "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
            "from airflow_transfer.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        argv = [
            "ip",
            "netns",
            "exec",
            tb.link.src_ns,
            sys.executable,
            "-c",
            boot,
            "copy",
            str(src),
            f"sftp://{sshd.user}@{sshd.host}:{sshd.port}{dst}",
            "--alt-protocols",
            f"ftp://{sshd.user}@{tb.link.dst_addr}:2121",
            "--switch-after",
            "3",
            "--probe-interval",
            "1",
            "-c",
            "4",
            "--pp",
            "4",
            "--no-bundle",  # files moved by ftp are told apart by sftp-server's log of SFTP opens
            "--json",
            "--identity",
            str(sshd.client_key),
            "--known-hosts",
            str(sshd.known_hosts),
            "--store",
            f"sqlite:///{tb.base}/store.db",
            "--progress-interval",
            "2",
        ]
        env = {
            **os.environ,
            "NETRC": str(ftp.netrc_path),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()

        def count(line: str) -> int:
            return sum(1 for e in err if line in e)

        kills = []
        floor = 0
        for round_ in (1, 2):
            _wait(lambda: _touched(dst) >= floor + 40, 300, f"40 files begun on sftp (round {round_})", proc, err)
            sshd.stop()
            kills.append(_done(dst))
            _wait(lambda: count("protocol switch: sftp -> ftp") >= round_, 120, f"switch to ftp {round_}", proc, err)
            # sftp uploads ahead of its verification: wait until ftp has finished files that
            # sftp never opened (in the sftp-server's log), i.e. data ftp moved itself.
            _wait(lambda: len(_ftp_only(dst, sshd)) >= 5 * round_, 180, f"files moved by ftp {round_}", proc, err)
            sshd.start()
            _wait(lambda: count("protocol switch: ftp -> sftp") >= round_, 120, f"switch back {round_}", proc, err)
            floor = _touched(dst)
        out, _ = proc.communicate(timeout=900)
        reader.join(5)
    finally:
        ftp.stop()
    assert proc.returncode == 0, _notes(err)
    summary = json.loads(out)
    print(
        "kills at",
        kills,
        "switches",
        summary["protocol_switches"],
        "protocols",
        summary["protocols"],
        summary["verify"],
        summary["bytes_moved"],
        summary["bytes"],
    )
    assert summary["failed"] == [] and summary["files"] == FILES, summary["failed"][:5]
    assert tree_digest(dst) == tree_digest(src)
    assert summary["verify"]["verified"] >= FILES - summary["files_skipped"]
    pairs = [(s["from"], s["to"]) for s in summary["protocol_switches"]]
    assert pairs == [("sftp", "ftp"), ("ftp", "sftp"), ("sftp", "ftp"), ("ftp", "sftp")], pairs
    assert all(s["reason"] and s["at"] for s in summary["protocol_switches"])
    assert summary["files_sent_twice_in_full"] == 0
    assert summary["protocols"]["ftp"]["files"] >= 10 and summary["protocols"]["sftp"]["files"] >= 100
    assert summary["protocols"]["ftp"]["bytes_moved"] >= 10 * 256 * 1024  # 10 files' worth, at least
    # The switches are in the store too.
    from airflow_transfer.store import Store

    with Store.open(f"sqlite:///{tb.base}/store.db") as store:
        rows = store.protocol_switches(summary["transfer_id"])
    assert [(r["from"], r["to"]) for r in rows] == pairs
