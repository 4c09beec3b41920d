"""--verify-mode block and sequential on a real sshd: corruption found per block, only the bad
blocks re-sent (counted from sftp-server's own log), the journal's block digests used on resume."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import temp_files, tree_digest, write_random

BLOCK = 64 * 1024
VICTIMS = {".f007.bin.atpart", ".f100.bin.atpart", ".f199.bin.atpart"}


@pytest.fixture(scope="module")
def files(test_base):
    src = test_base / "verify-blocks-src"
    for i in range(200):
        write_random(src / f"v{i % 5}" / f"f{i:03d}.bin", 40_000 + 997 * i, seed=900 + i)
    return src


def _flip(path: str, offset: int = 1234) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def _flip_first_time(victims: set[str]):
    done: set[str] = set()
    lock = threading.Lock()

    def hook(tmp: str) -> None:
        name = os.path.basename(tmp)
        with lock:
            if name not in victims or name in done:
                return
            done.add(name)
        _flip(tmp)

    return hook, done


def written_to(sshd, since: int, names: set[str]) -> dict[str, int]:
    """Bytes sftp-server says it wrote through handles of these temporary files (its close lines)."""
    with open(sshd.sftp_log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    out: dict[str, int] = {}
    for m in re.finditer(r'close "([^"]+)" bytes read \d+ written (\d+)', text):
        name = os.path.basename(m.group(1))
        if name in names:
            out[name] = out.get(name, 0) + int(m.group(2))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_block_mode_repairs_only_the_corrupted_blocks(threads, files, sshd, remote_dir):
    hook, done = _flip_first_time(VICTIMS)
    mark = sshd.log_mark()
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)),
            Endpoint("sftp", str(remote_dir / "b"), sshd.target()),
            TransferParams(pp=8, cc=4),
            before_verify=hook,
            use_store=False,
            verify_mode="block",
            verify_block_size=BLOCK,
            verify_threads=threads,
        )
    )
    assert done == VICTIMS
    v = summary["verify"]
    assert (v["mode"], v["where"], v["block_size"], v["threads"]) == ("block", "helper", BLOCK, threads)
    assert (v["mismatched"], v["repaired"], v["verified"]) == (3, 3, 200) and summary["failed"] == []
    assert v["blocks"]["mismatched"] == 3 and v["blocks"]["resent"] == 3
    assert v["balance"]["c_block_s"] > 0 and v["balance"]["c_block_measured_s"] > 0
    assert v["balance"]["t_block_measured_s"] > 0
    assert tree_digest(remote_dir / "b") == tree_digest(files)
    assert temp_files(remote_dir) == []
    # Each victim: the whole file once, then block 0 (where the byte was flipped) once more.
    sizes = {f".f{i:03d}.bin.atpart": 40_000 + 997 * i for i in (7, 100, 199)}
    block0 = {n: min(s, BLOCK) for n, s in sizes.items()}
    assert written_to(sshd, mark, set(VICTIMS)) == {n: s + block0[n] for n, s in sizes.items()}
    assert summary["bytes_resent"] == sum(block0.values()) == v["blocks"]["bytes_resent"]


def test_block_mode_fails_a_file_that_stays_wrong_with_both_digests(files, sshd, remote_dir):
    def always(tmp: str) -> None:
        if tmp.endswith(".f033.bin.atpart"):
            _flip(tmp, 70_000)  # block 1 of 72901 bytes

    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)),
            Endpoint("sftp", str(remote_dir / "p"), sshd.target()),
            TransferParams(pp=8, cc=2),
            before_verify=always,
            use_store=False,
            verify_mode="block",
            verify_block_size=BLOCK,
        )
    )
    failed = {f["path"]: f["error"] for f in summary["failed"]}
    assert list(failed) == ["v3/f033.bin"]
    err = failed["v3/f033.bin"]
    assert re.search(r"first at 65536\+\d+: source sha256:[0-9a-f]{64} destination sha256:[0-9a-f]{64}", err), err
    assert "still wrong after 2 re-sends" in err
    assert not (remote_dir / "p" / "v3" / "f033.bin").exists()


@pytest.mark.parametrize("mode", ["sequential", "file", "block"])
def test_every_mode_gives_identical_bytes(mode, files, sshd, remote_dir):
    def copy(dst: Path) -> int:
        """Copy into dst; how many files were completely there, unverified, when checksumming began."""
        seen: list[int] = []

        def first_checksum(tmp: str) -> None:
            if not seen:
                seen.append(
                    sum(1 for p in dst.rglob("*.atpart") if p.stat().st_size == 40_000 + 997 * int(p.name[2:5]))
                )

        summary = run_copy(
            CopyRequest(
                Endpoint("file", str(files)),
                Endpoint("sftp", str(dst), sshd.target()),
                TransferParams(pp=4, cc=2),
                use_store=False,
                verify_mode=mode,
                before_verify=first_checksum,
            )
        )
        v = summary["verify"]
        assert (v["mode"], v["verified"], v["mismatched"]) == (mode, 200, 0) and summary["failed"] == []
        assert tree_digest(dst) == tree_digest(files)
        assert len(seen) == 1
        return seen[0]

    if mode == "sequential":
        assert copy(remote_dir / mode) == 200  # all transfers first, then all checksums: always
        return
    # Checksums may begin while files are still moving; whether they did in one copy depends on
    # the machine (a loaded CI run once had all 200 files in before the first checksum). Sequential
    # verification never overlaps, so one overlap in three copies tells the modes apart.
    firsts = []
    for attempt in range(3):
        firsts.append(copy(remote_dir / f"{mode}-{attempt}"))
        if firsts[-1] < 200:
            break
    assert firsts[-1] < 200, f"checksums never began while files were moving: {firsts}"


_KILLER = (
    r"""
import os, signal, sys, time
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh import SSHTarget

src, dst, host, port, user, key, known, victims = sys.argv[1:9]
victims = dict(v.split("=") for v in victims.split(","))  # temporary path -> size

def hook(tmp):
    # The first destination digest of the run: wait until the victims are complete at the
    # destination, corrupt them, give the journal writer time to write their block digests,
    # then die before anything is verified.
    while any(not os.path.exists(p) or os.path.getsize(p) < int(n) for p, n in victims.items()):
        time.sleep(0.05)
    for p in victims:
        with open(p, "r+b") as f:
            f.seek(1234)
            b = f.read(1)
            f.seek(1234)
            f.write(bytes([b[0] ^ 0xFF]))
    time.sleep(2.0)
    os.kill(os.getpid(), signal.SIGKILL)

target = SSHTarget(host=host, port=int(port), username=user, key_filenames=[key], known_hosts=[known])
run_copy(CopyRequest(Endpoint("file", src), Endpoint("sftp", dst, target), TransferParams(pp=8, cc=4),
                     before_verify=hook, transfer_key="crash-blocks", verify_mode="block",
                     verify_block_size=%d))
"""
    % BLOCK
)


def test_block_mode_after_a_crash_uses_the_journal_block_digests(files, sshd, remote_dir):
    import subprocess
    import sys

    from tests.support.cli import run_cli, ssh_args

    dst = remote_dir / "crash"
    names = {7: "v2/.f007.bin.atpart", 100: "v0/.f100.bin.atpart", 199: "v4/.f199.bin.atpart"}
    victims = ",".join(f"{dst / n}={40_000 + 997 * i}" for i, n in names.items())
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _KILLER,
            str(files),
            str(dst),
            sshd.host,
            str(sshd.port),
            sshd.user,
            str(sshd.client_key),
            str(sshd.known_hosts),
            victims,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed by itself, before any verdict
    assert not any(p.name.endswith(".bin") for p in dst.rglob("*.bin")), "nothing may be renamed yet"

    mark = sshd.log_mark()
    res = run_cli(
        "copy",
        str(files),
        sshd.url(str(dst)),
        "--json",
        "--transfer-key",
        "crash-blocks",
        "--verify-mode",
        "block",
        "--verify-block-size",
        str(BLOCK),
        "--no-bundle",  # the SFTP block path resumes from journaled block digests
        *ssh_args(sshd),
    )
    assert res.code == 0, res.err[-2000:]
    v = res.summary["verify"]
    assert (v["mismatched"], v["repaired"], v["verified"]) == (3, 3, 200)
    assert 1 <= v["threads"] <= 4  # not given: balanced from t and c as they were measured
    assert v["blocks"]["from_journal"] >= 3 and v["blocks"]["resent"] == 3
    # The victims were complete and journaled: only their corrupted block 0 went over the wire again.
    sizes = {os.path.basename(n): 40_000 + 997 * i for i, n in names.items()}
    assert written_to(sshd, mark, set(sizes)) == {n: min(s, BLOCK) for n, s in sizes.items()}
    assert tree_digest(dst) == tree_digest(files)
    assert temp_files(dst) == []


def test_block_mode_resume_checks_what_the_temporary_files_hold_beyond_the_journal(files, sshd, remote_dir):
    """The journal lags the server (and a killed copy loses what it had not journaled): a resumed
    block-mode upload checks the blocks its temporary files already hold, with source digests
    computed then, and sends only those that differ. Here the first run journaled md5 blocks,
    which a sha256 run must ignore, so everything at the destination is beyond the journal."""
    import subprocess
    import sys

    from tests.support.cli import run_cli, ssh_args

    dst = remote_dir / "tail"
    names = {7: "v2/.f007.bin.atpart", 100: "v0/.f100.bin.atpart", 199: "v4/.f199.bin.atpart"}
    victims = ",".join(f"{dst / n}={40_000 + 997 * i}" for i, n in names.items())
    killer = (
        _KILLER.replace('verify_mode="block"', 'verify="md5", verify_mode="block"')
        .replace('"crash-blocks"', '"crash-blocks-md5"')
        .replace("    for p in victims:\n", "    for p in list(victims)[-1:]:\n")
    )  # corrupt f199 only
    assert killer.count('verify="md5"') == 1 and "list(victims)[-1:]" in killer
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            killer,
            str(files),
            str(dst),
            sshd.host,
            str(sshd.port),
            sshd.user,
            str(sshd.client_key),
            str(sshd.known_hosts),
            victims,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]

    mark = sshd.log_mark()
    res = run_cli(
        "copy",
        str(files),
        sshd.url(str(dst)),
        "--json",
        "--transfer-key",
        "crash-blocks-md5",
        "--verify",
        "sha256",
        "--verify-mode",
        "block",
        "--verify-block-size",
        str(BLOCK),
        "--no-bundle",  # the SFTP block path checks what temporary files hold
        *ssh_args(sshd),
    )
    assert res.code == 0, res.err[-2000:]
    v = res.summary["verify"]
    assert (v["mismatched"], v["repaired"], v["verified"]) == (1, 1, 200)
    assert v["blocks"]["from_journal"] >= 3 and v["blocks"]["resent"] == 1
    # f007 and f100 were complete: not a byte again; f199 (4 blocks): only its bad block 0.
    written = written_to(sshd, mark, {".f007.bin.atpart", ".f100.bin.atpart", ".f199.bin.atpart"})
    assert {k: n for k, n in written.items() if n} == {".f199.bin.atpart": BLOCK}
    assert tree_digest(dst) == tree_digest(files)
    assert temp_files(dst) == []


def test_block_mode_resumes_a_ranged_file_from_its_journaled_blocks(sshd, remote_dir, local_dir):
    import signal
    import subprocess
    import sys
    import time

    from tests.support.cli import run_cli, ssh_args

    src = local_dir / "ranged"
    # 256 MiB: on a fast day the copy moved the rest of a 128 MiB file during the 0.5 s below.
    size = 256 * 1024 * 1024
    write_random(src / "big.bin", size, seed=4242)
    dst = remote_dir / "ranged"
    args = [
        "copy",
        str(src),
        sshd.url(str(dst)),
        "--json",
        "-p",
        "2",
        "--transfer-key",
        "ranged-blocks",
        "--verify-mode",
        "block",
        "--verify-block-size",
        str(1024 * 1024),
        *ssh_args(sshd),
    ]
    before = sshd.log_mark()
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_transfer.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    tmp = dst / ".big.bin.atpart"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if tmp.exists() and tmp.stat().st_blocks * 512 > 40 * 1024 * 1024:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the copy ended before it could be interrupted"
    time.sleep(0.5)  # the journal writer's batches reach the store
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (dst / "big.bin").exists()
    # The killed client's sftp-servers log their handles' totals when they notice the
    # dropped connection, which on a busy machine can be seconds later: count from after that.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ops = [op for _pid, op, _path in sshd.sftp_events(before)]
        if ops.count("session opened") == ops.count("session closed"):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the killed copy's SFTP sessions did not end within 60 s: {ops[-10:]}")

    mark = sshd.log_mark()
    res = run_cli(*args)
    assert res.code == 0, res.err[-2000:]
    s = res.summary
    assert s["files_resumed"] == 1 and s["verify"]["verified"] == 1
    b = s["verify"]["blocks"]
    assert b["from_journal"] >= 20 and b["mismatched"] == 0  # journaled blocks checked at the destination
    rewritten = sum(written_to(sshd, mark, {".big.bin.atpart"}).values())
    assert rewritten <= size - b["from_journal"] * 1024 * 1024  # ... and not sent again
    assert tree_digest(dst) == tree_digest(src)


@pytest.mark.parametrize("case", ["no-python", "no-exec"])
def test_block_mode_fallbacks_verify_and_repair(case, files, test_base):
    """coreutils (whole files: the whole file is re-sent) and read-back (blocks over SFTP)."""
    import shutil

    from tests.support.sshd import chown_to_user, restricted_sshd

    base = test_base / f"sshd-blocks-{case}"
    server = restricted_sshd(base, case)
    try:
        dst = base / "dst"
        dst.mkdir()
        chown_to_user(dst, server.user)
        hook, done = _flip_first_time({".f150.bin.atpart"})
        summary = run_copy(
            CopyRequest(
                Endpoint("file", str(files)),
                Endpoint("sftp", str(dst / "x"), server.target()),
                TransferParams(pp=8, cc=2),
                use_store=False,
                before_verify=hook,
                verify_mode="block",
                verify_block_size=BLOCK,
            )
        )
        v = summary["verify"]
        assert done == {".f150.bin.atpart"}
        assert (v["verified"], v["mismatched"], v["repaired"]) == (200, 1, 1) and summary["failed"] == []
        assert v["where"] == ("coreutils" if case == "no-python" else "read-back")
        size = 40_000 + 997 * 150
        assert summary["bytes_resent"] == (size if case == "no-python" else BLOCK)
        assert tree_digest(dst / "x") == tree_digest(files)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_block_mode_on_a_local_copy_says_it_verified_per_file(files, local_dir):
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)), Endpoint("file", str(local_dir / "loc")), use_store=False, verify_mode="block"
        )
    )
    v = summary["verify"]
    assert (v["mode"], v["where"], v["verified"]) == ("file", "local", 200)
    assert "block mode verifies uploads" in v["why"]
    assert tree_digest(local_dir / "loc") == tree_digest(files)


def test_block_mode_verifies_when_the_helpers_connection_fails_at_first(files, sshd, remote_dir):
    """The checksum helper opens in its worker thread while data flows: a connection failure
    there (a fault injected at acquire, as a refused or reset handshake would raise) is retried
    like a dropped channel, and every file is still verified by the helper."""
    from airflow_transfer.protocols.pool import SFTPPool

    failed: list[str] = []

    class FlakyForTheHelper(SFTPPool):
        def acquire(self, prefer=None):
            name = threading.current_thread().name
            if name.startswith("verify-blocks") and not failed:
                failed.append(name)
                raise ConnectionError("connection reset by peer (injected)")
            return super().acquire(prefer)

    dst = Endpoint("sftp", str(remote_dir / "flaky-helper"), sshd.target())
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)),
            dst,
            TransferParams(pp=8, cc=2),
            pool=FlakyForTheHelper(dst.target),
            bundle=False,  # small files go to the checksum helper, whose connection fails here
            use_store=False,
            verify_mode="block",
            verify_block_size=BLOCK,
            verify_threads=1,
        )
    )
    assert failed == ["verify-blocks0"]
    v = summary["verify"]
    assert (v["where"], v["verified"], v["mismatched"]) == ("helper", 200, 0) and summary["failed"] == []
    assert tree_digest(remote_dir / "flaky-helper") == tree_digest(files)
    assert temp_files(remote_dir / "flaky-helper") == []


def _commands_started(sshd, since: int) -> int:
    """Exec sessions the real sshd started (its VERBOSE log) after offset `since`."""
    return sshd.log_text()[since:].count("Starting session: command for")


@pytest.mark.parametrize("big", [False, True])
def test_block_mode_starts_its_digest_helper_only_for_files_that_go_over_sftp(big, sshd, remote_dir, test_base):
    """Files that all travel in bundles are checked by the bundle sink itself: the block
    verifier's own helper (an exec channel and a python3 on the server) is never started. One
    file too big for a bundle starts it, and its blocks are checked by it."""
    src = test_base / f"helper-when-needed-{big}"
    for i in range(30):
        write_random(src / f"s{i:02d}.bin", 5_000 + 31 * i, seed=4000 + i)
    if big:
        write_random(src / "big.bin", 3 * 1024 * 1024 + 17, seed=4099)
    dst = Endpoint("sftp", str(remote_dir / f"helper-when-needed-{big}"), sshd.target())
    since = len(sshd.log_text())
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            dst,
            TransferParams(pp=8, cc=1),
            use_store=False,
            verify_mode="block",
            verify_block_size=BLOCK,
            verify_threads=1,
        )
    )
    assert summary["failed"] == [] and summary["verify"]["verified"] == 30 + big
    assert tree_digest(remote_dir / f"helper-when-needed-{big}") == tree_digest(src)
    # One sink on the one connection; the digest helper only where a file went over SFTP.
    assert _commands_started(sshd, since) == 1 + big
    assert summary["verify"]["blocks"]["verified"] == (-(-(3 * 1024 * 1024 + 17) // BLOCK) if big else 0)
    assert summary["server"]["exec"] == "python3"
