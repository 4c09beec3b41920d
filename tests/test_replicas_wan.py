"""Replicas: two sshd hosts serve the same tree; one is behind the emulated link, throttled.

The client runs in the src namespace. Replica "slow" is the testbed's sshd in
dst, behind a 50 ms / 20 Mbit/s link; replica "fast" is a second sshd inside
src itself (its loopback, no emulator). More bytes must come from the fast
one; then the fast one is stopped mid-run and the copy still completes, every
file byte-identical and verified.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

from tests.support.data import tree_digest, write_random
from tests.support.sshd import SSHServer, chown_to_user
from tests.support.wan import REPO_ROOT, wan_testbed  # noqa: F401  (fixture)


def _tree(root, n, seed):
    rng = random.Random(seed)
    for i in range(n):
        write_random(root / f"d{i % 3}" / f"f{i:03d}.bin", rng.randint(128 * 1024, 384 * 1024), seed=seed * 1000 + i)
    chown_to_user(root, "attest") if os.geteuid() == 0 else None
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)


def _second_sshd(tb):
    """An sshd in the src namespace that accepts the testbed's client key."""
    base = tb.base / "sshd-fast"
    base.mkdir()
    for name in ("id_ed25519", "id_ed25519.pub"):
        shutil.copy(tb.sshd.base / name, base / name)
    fast = SSHServer(base, host="127.0.0.1", port=2223, netns=tb.link.src_ns).start()
    known = tb.base / "known_hosts_both"
    known.write_text(tb.sshd.known_hosts.read_text() + fast.known_hosts.read_text())
    return fast, known


def _run(tb, argv, env=None):
    boot = (
        "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
        "from airflow_transfer.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    full = ["ip", "netns", "exec", tb.link.src_ns, sys.executable, "-c", boot, *argv]
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)


def test_faster_replica_serves_more_and_losing_one_still_completes(wan_testbed):
    tb = wan_testbed(rtt_ms=50, rate_mbit=20)
    fast, known = _second_sshd(tb)
    try:
        data = tb.remote_dir("data")
        _tree(data, 60, 5)
        user = tb.sshd.user
        slow_url = f"sftp://{user}@{tb.sshd.host}:{tb.sshd.port}{data}"
        fast_url = f"sftp://{user}@127.0.0.1:{fast.port}{data}"
        common = [
            "--identity",
            str(tb.sshd.client_key),
            "--known-hosts",
            str(known),
            "-c",
            "4",
            "--json",
            "--store",
            f"sqlite:///{tb.base}/store.db",
        ]

        # 1. Both replicas up: most bytes from the fast one.
        out1 = tb.base / "out1"
        p = _run(tb, ["copy", slow_url, str(out1), "--replica", fast_url, *common])
        o, e = p.communicate(timeout=600)
        assert p.returncode == 0, e[-3000:]
        s = json.loads(o)
        reps = {r["url"].split("@")[1].split(":")[0]: r for r in s["replicas"]}
        print("replicas", s["replicas"])
        assert reps["127.0.0.1"]["bytes"] > reps[tb.sshd.host]["bytes"]
        assert tree_digest(out1) == tree_digest(data)

        # 2. The fast replica stops mid-run: the slow one finishes the job.
        out2 = tb.base / "out2"
        p = _run(tb, ["copy", fast_url, str(out2), "--replica", slow_url, *common])
        err: list[str] = []
        threading.Thread(target=lambda: err.extend(iter(p.stderr.readline, "")), daemon=True).start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            if out2.exists() and sum(len(n) for _, _, n in os.walk(out2)) >= 10:
                break
            time.sleep(0.02)
        fast.stop()
        o = p.stdout.read()
        p.wait(timeout=600)
        assert p.returncode == 0, "".join(err)[-3000:]
        s = json.loads(o)
        print("replicas after stop", s["replicas"])
        reps = {r["url"].split("@")[1].split(":")[0]: r for r in s["replicas"]}
        assert reps["127.0.0.1"]["dropped"] and reps[tb.sshd.host]["files"] > 0
        assert s["failed"] == [] and tree_digest(out2) == tree_digest(data)
        assert s["verify"]["verified"] == s["files"]
    finally:
        fast.stop()
