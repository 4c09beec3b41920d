"""rclone's sftp backend (Debian package `rclone`): defaults, a small hand-tuned grid, a download.

rclone checks each uploaded file by running `md5sum` on the server over SSH
exec unless `--sftp-disable-hashcheck` is given: one `md5sum` per file, which
shows on small files (docs/benchmarks.md has rows with the check on and off);
every row's name says which. The remote is
defined in a config file written per testbed (`rclone.conf`) with the hash
commands set explicitly, so rclone does not probe the server's shell first.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from benchmarks.contenders.base import AVAILABLE, Availability, Contender, missing

REMOTE = "bench"


class Rclone(Contender):
    def __init__(self, name: str, description: str, flags: list[str], direction: str = "upload") -> None:
        super().__init__()
        self.name = name
        self.description = description
        self.flags = flags
        self.direction = direction
        self.config: Path | None = None

    def available(self) -> Availability:
        binary = shutil.which("rclone")
        if binary is None:
            return missing("rclone is not installed: `apt-get install rclone` (benchmarks/bench.sh does)")
        try:
            subprocess.run([binary, "version"], capture_output=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return missing(f"`rclone version` failed: {exc}")
        return AVAILABLE

    def prepare(self, bed) -> None:
        super().prepare(bed)
        self.config = bed.work / "rclone.conf"
        self.config.write_text(
            f"[{REMOTE}]\ntype = sftp\nhost = {bed.host}\nport = {bed.port}\nuser = {bed.user}\n"
            f"key_file = {bed.key}\nknown_hosts_file = {bed.known_hosts}\nshell_type = unix\n"
            "md5sum_command = md5sum\nsha1sum_command = sha1sum\n"
        )

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        if self.direction == "upload":
            src, dst = str(dataset_dir), f"{REMOTE}:{remote_dir}"
        else:
            src, dst = f"{REMOTE}:{remote_dir}", str(dataset_dir)
        return ["rclone", "copy", src, dst, "--config", str(self.config), "--stats", "0", "-q", *self.flags]


def contenders() -> list[Contender]:
    tuned = ["--sftp-chunk-size", "255k", "--sftp-concurrency", "64"]
    out: list[Contender] = [
        Rclone(
            "rclone defaults (4 transfers, hash check on)",
            "`rclone copy` with its defaults: 4 transfers, 32 KiB SFTP chunks, 64 requests in flight per file, "
            "md5sum on the server after each file",
            [],
        ),
    ]
    for transfers in (4, 16, 32):
        out.append(
            Rclone(
                f"rclone --transfers {transfers} chunk 255k (hash check off)",
                f"{transfers} transfers, 255 KiB SFTP chunks, 64 requests in flight per file, "
                "`--sftp-disable-hashcheck`",
                [
                    "--transfers",
                    str(transfers),
                    "--checkers",
                    str(max(8, transfers)),
                    *tuned,
                    "--sftp-disable-hashcheck",
                ],
            )
        )
    out.append(
        Rclone(
            "rclone --transfers 16 chunk 255k (hash check on)",
            "16 transfers, 255 KiB SFTP chunks, 64 requests in flight per file, md5sum on the server",
            ["--transfers", "16", "--checkers", "16", *tuned],
        )
    )
    out.append(
        Rclone(
            "rclone download --transfers 16 chunk 255k (hash check off)",
            "download (dst -> src): 16 transfers, 255 KiB SFTP chunks, `--sftp-disable-hashcheck`",
            ["--transfers", "16", "--checkers", "16", *tuned, "--sftp-disable-hashcheck"],
            direction="download",
        )
    )
    return out
