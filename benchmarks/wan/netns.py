"""Network namespace plumbing: create, enter, configure, empty and delete.

Entering a namespace in-process (`in_netns`) moves only the calling *thread*:
on Linux namespaces belong to tasks (threads), not to processes. Sockets keep
the namespace they were created in, and threads started from inside the block
inherit it; threads that already existed, and the rest of the process, do not.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps its bind mounts
CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET) failed: {os.strerror(err)}")


@contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Runs the block with the calling thread inside network namespace `name`.

    Sockets opened in the block stay in `name` after it ends; threads started
    in the block stay there too. Needs CAP_SYS_ADMIN (root).
    """
    path = NETNS_DIR / name
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RuntimeError(f"network namespace {name!r} does not exist ({path} missing): is the link up?") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def ip_batch(ns: str, commands: list[str]) -> None:
    """Runs several `ip` commands inside `ns` in one process."""
    done = subprocess.run(
        ["ip", "-n", ns, "-batch", "-"], input="\n".join(commands) + "\n", capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"configuring namespace {ns} failed: {done.stderr.strip()}")


def add(name: str) -> None:
    done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`ip netns add {name}` failed: {done.stderr.strip()}")


def write_sysctls(name: str, values: dict[str, str]) -> None:
    """Writes /proc/sys entries as seen from inside namespace `name`
    (no dependency on procps' sysctl)."""
    with in_netns(name):
        for key, value in values.items():
            path = Path("/proc/sys") / key.replace(".", "/")
            try:
                path.write_text(value)
            except OSError as exc:
                raise RuntimeError(f"setting {key}={value!r} in namespace {name} failed: {exc}") from exc


def pids(name: str) -> list[int]:
    """Processes whose main thread lives in namespace `name` (as `ip netns pids`)."""
    try:
        st = os.stat(NETNS_DIR / name)
    except FileNotFoundError:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (ns.st_ino, ns.st_dev) == (st.st_ino, st.st_dev):
            found.append(int(entry.name))
    return found


def kill_all(name: str, grace: float = 1.0) -> None:
    """Ends every process inside `name`: a namespace with live processes
    outlives `ip netns del` and keeps its devices and sockets."""
    me = os.getpid()  # a thread of ours may be inside via in_netns; never kill ourselves
    victims = [p for p in pids(name) if p != me]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            victims = [p for p in victims if _alive(p)]
            if not victims:
                return
            time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def delete(name: str) -> None:
    """Kills what runs inside, then removes the namespace. Missing is fine."""
    if not exists(name):
        return
    kill_all(name)
    done = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True)
    if done.returncode != 0 and exists(name):
        raise RuntimeError(f"`ip netns del {name}` failed: {done.stderr.strip()}")
