"""Compiles the link emulator (linkemu.c) at first use, once per source version."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("linkemu.c")
CFLAGS = ["-O2", "-Wall", "-Wextra", "-pthread"]
BINARY_PREFIX = "linkemu-"  # cleanup recognises emulator processes by this name


def _cache_dirs() -> list[Path]:
    # The source tree first (git-ignored), then the user's cache for read-only checkouts.
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [Path(__file__).with_name("build"), xdg / "airflow-transfer-wan"]


def emulator_binary() -> Path:
    """Path of the compiled emulator, building it if this source version has no binary yet.

    The binary's name carries a hash of the source and flags, so an edited
    linkemu.c is rebuilt and concurrent runs never execute a half-written file
    (each compiles to a temporary name and renames it into place).
    """
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + " ".join(CFLAGS).encode()).hexdigest()[:16]
    name = f"{BINARY_PREFIX}{digest}"
    for cache in _cache_dirs():
        if (cache / name).is_file():
            return cache / name
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError(
            f"no C compiler: the WAN emulator ({SOURCE}) is compiled at first use; "
            "install gcc with `bash scripts/install-wan-deps.sh` (as root)"
        )
    errors = []
    for cache in _cache_dirs():
        try:
            cache.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".linkemu-", dir=cache)
            os.close(fd)
        except OSError as exc:
            errors.append(f"{cache}: {exc}")
            continue
        done = subprocess.run([gcc, *CFLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            os.unlink(tmp)
            raise RuntimeError(f"compiling {SOURCE} failed:\n{done.stderr.strip()}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, cache / name)
        for old in cache.glob(f"{BINARY_PREFIX}*"):
            if old.name != name:  # builds of earlier sources; a running one keeps its inode
                old.unlink(missing_ok=True)
        return cache / name
    raise RuntimeError(f"no writable cache directory for the WAN emulator binary: {'; '.join(errors)}")
