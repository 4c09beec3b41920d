"""The OpenSSH tools with their defaults: `sftp -b` (put -r), `scp -r`, `rsync -a -e ssh`.

All three run the system `ssh` with the same options (testbed.ssh_options:
the testbed's key, its pinned host key, an empty config, no prompts), so the
cipher and every other setting is what the installed OpenSSH picks by default.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from benchmarks.contenders.base import AVAILABLE, Availability, Contender, missing


def _need(*tools: str) -> Availability:
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return missing(
            f"{', '.join(absent)} not installed: `apt-get install openssh-client rsync` (benchmarks/bench.sh does)"
        )
    return AVAILABLE


def _top_level(dataset_dir: Path) -> list[str]:
    return sorted(os.path.join(dataset_dir, n) for n in os.listdir(dataset_dir))


class Sftp(Contender):
    name = "OpenSSH sftp -b (put -r)"
    description = (
        "`sftp -b batch` with `put -r` of each top-level entry: one connection, "
        "64 requests of 32 KiB in flight per file (its defaults), one file at a time"
    )

    def available(self) -> Availability:
        return _need("sftp", "ssh")

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        bed = self._bed()
        batch = bed.work / "sftp-batch.txt"
        # Quoted names: sftp's batch parser splits on blanks like a shell.
        batch.write_text(f'cd "{remote_dir}"\n' + "".join(f'put -r "{p}"\n' for p in _top_level(dataset_dir)))
        return ["sftp", "-q", "-b", str(batch), "-P", str(bed.port), *bed.ssh_options(), f"{bed.user}@{bed.host}"]


class Scp(Contender):
    name = "OpenSSH scp -r"
    description = "`scp -r` of each top-level entry (OpenSSH 9 scp speaks SFTP underneath), defaults otherwise"

    def available(self) -> Availability:
        return _need("scp", "ssh")

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        bed = self._bed()
        return [
            "scp",
            "-q",
            "-r",
            "-P",
            str(bed.port),
            *bed.ssh_options(),
            *_top_level(dataset_dir),
            f"{bed.user}@{bed.host}:{remote_dir}/",
        ]


class Rsync(Contender):
    name = "rsync -a -e ssh"
    description = "`rsync -a` over ssh (rsync's own protocol, one connection, whole files: destination is empty)"

    def available(self) -> Availability:
        return _need("rsync", "ssh")

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        bed = self._bed()
        ssh = shlex.join(["ssh", "-p", str(bed.port), *bed.ssh_options()])
        return ["rsync", "-a", "-e", ssh, f"{dataset_dir}/", f"{bed.user}@{bed.host}:{remote_dir}/"]


def contenders() -> list[Contender]:
    return [Sftp(), Scp(), Rsync()]
