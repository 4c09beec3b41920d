"""lftp's `mirror` over SFTP (Debian package `lftp`): 16 files at once, segmented downloads.

    lftp --norc -c 'set sftp:connect-program "ssh -a -x -F ... -o BatchMode=yes"; ...;
                    open sftp://USER:@HOST:PORT; mirror -R --parallel=16 --use-pget-n=4 LOCAL REMOTE'

A peer many scientists use for many small files. Its SFTP runs over the system
`ssh` (sftp:connect-program), which gets the same options as the OpenSSH rows
(testbed.ssh_options: the testbed's key, its pinned host key, an empty config,
BatchMode), so lftp never prompts and never accepts an unknown host key.
Everything else is lftp's default (16 SFTP requests of 32 KiB in flight, file
permissions and times set after each upload), except that a failed operation is
not retried: a run that meets an error fails like the other tools' runs instead
of looping until the time limit.

`--use-pget-n=4` is part of the command as users write it, but lftp applies it
only when the target is local: a download splits each file of at least twice
`pget:min-chunk-size` (1 MiB by default) over 4 connections; an upload sends
every file over one.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from benchmarks.contenders.base import AVAILABLE, Availability, Contender, missing

PARALLEL = 16  # files at once (mirror --parallel)
PGET_N = 4  # connections per downloaded file (mirror --use-pget-n)


def quote(value: str) -> str:
    """One lftp command-language word: double quotes, with backslash before `\\` and `"` inside."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def script(ssh_argv: list[str], user: str, host: str, port: int, src: str, dst: str, reverse: bool) -> str:
    """The lftp commands for one mirror: `reverse` uploads `src` (local) into `dst` (remote),
    otherwise `src` is remote and `dst` local. lftp splits the connect program like a shell,
    so `ssh_argv` is joined with shell quoting before lftp's own quoting."""
    direction = ["-R"] if reverse else []
    mirror = ["mirror", *direction, f"--parallel={PARALLEL}", f"--use-pget-n={PGET_N}", quote(src), quote(dst)]
    return "; ".join(
        [
            f"set sftp:connect-program {quote(shlex.join(ssh_argv))}",
            "set sftp:auto-confirm no",  # never answer yes to a host-key question (BatchMode means none is asked)
            "set net:max-retries 1",
            "set cmd:fail-exit yes",
            # The empty password after the colon: lftp asks for none; the key authenticates.
            f"open sftp://{user}:@{host}:{port}",
            " ".join(mirror),
        ]
    )


class Lftp(Contender):
    def __init__(self, direction: str = "upload") -> None:
        super().__init__()
        self.direction = direction
        knobs = f"--parallel={PARALLEL} --use-pget-n={PGET_N}"
        if direction == "upload":
            self.name = f"lftp mirror -R {knobs}"
            self.description = (
                f"`lftp mirror -R {knobs}` over sftp (lftp's SFTP client on the system `ssh`): "
                f"{PARALLEL} files at once, each over one connection (lftp segments downloads only), 16 requests "
                "of 32 KiB in flight per file (its defaults), permissions and times set after each file"
            )
        else:
            self.name = f"lftp download mirror {knobs}"
            self.description = (
                f"download (dst -> src): `lftp mirror {knobs}` over sftp: {PARALLEL} files at once, each file "
                f"of 2 MiB or more over {PGET_N} connections, lftp's defaults otherwise"
            )

    def available(self) -> Availability:
        absent = [t for t in ("lftp", "ssh") if shutil.which(t) is None]
        if absent:
            return missing(
                f"{', '.join(absent)} not installed: `apt-get install lftp openssh-client` "
                "(scripts/install-bench-deps.sh, run by benchmarks/bench.sh, does)"
            )
        try:
            subprocess.run(["lftp", "--version"], capture_output=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return missing(f"`lftp --version` failed: {exc}")
        return AVAILABLE

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        bed = self._bed()
        ssh = ["ssh", "-a", "-x", *bed.ssh_options()]  # lftp's default program, "ssh -a -x", plus the bed's options
        if self.direction == "upload":
            src, dst = str(dataset_dir), str(remote_dir)
        else:
            src, dst = str(remote_dir), str(dataset_dir)
        commands = script(ssh, bed.user, bed.host, bed.port, src, dst, reverse=self.direction == "upload")
        return ["lftp", "--norc", "-c", commands]


def contenders() -> list[Contender]:
    return [Lftp("upload"), Lftp("download")]
