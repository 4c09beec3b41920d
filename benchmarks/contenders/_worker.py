"""Runs one library contender's transfer inside `src` and prints its own measurements as JSON.

    python -m benchmarks.contenders._worker ARGS_JSON

Libraries are timed around the transfer call only: in their real setting
(an Airflow task, a notebook) the library is already imported and the hook
already built, so import time is not what a user waits for. Connecting is. CPU is this process's own use over the
same interval (all threads: paramiko's transport threads, fsspec's loop).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def hook_upload(a: dict) -> Callable[[], None]:
    from airflow.providers.sftp.hooks.sftp import SFTPHook

    # Resolving the connection happens before the clock starts, as it would in a task's
    # execute() before the copy; every SSH connection is opened inside the timed call.
    hook = SFTPHook(ssh_conn_id=a["conn_id"])
    return lambda: hook.store_directory_concurrently(a["remote"], a["local"], workers=a["workers"])


def sshfs_upload(a: dict) -> Callable[[], None]:
    from sshfs import SSHFileSystem

    local = Path(a["local"])

    def copy() -> None:
        files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
        pool = {"max_sessions": a["max_sessions"]} if a.get("max_sessions") else {}
        fs = SSHFileSystem(
            a["host"], port=a["port"], username=a["user"], client_keys=[a["key"]], known_hosts=a["known_hosts"], **pool
        )
        for d in sorted({os.path.dirname(f) for f in files} - {""}):
            fs.makedirs(f"{a['remote']}/{d}", exist_ok=True)
        # One put of the whole file list: fsspec runs the copies concurrently on its event loop.
        fs.put([str(local / f) for f in files], [f"{a['remote']}/{f}" for f in files])

    return copy


WORKERS = {"hook": hook_upload, "sshfs": sshfs_upload}


def main() -> int:
    args = json.loads(sys.argv[1])
    work = WORKERS[args["kind"]](args)
    c0, t0 = _cpu(), time.monotonic()
    work()
    seconds, cpu = time.monotonic() - t0, _cpu() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_rss_mb": rss_mb}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
