"""airflow-transfer itself, through its command line (docs/transfers.md), as a user runs it.

Rows: untuned (pp=1, p=1, cc=1: one connection, one file operation at a
time), a fixed hand-picked setting, one row per `--algorithm` the installed
CLI accepts (read from `copy --help` at run time, so algorithms added later
are benchmarked by name with the CLI's defaults), and a download row.

The algorithm rows run as they are meant to be deployed: the profiling DAG
has measured the link into the tuning library (docs/profilers.md), so before
the first of them on a link, `airflow-transfer profile --quick` runs once
against the testbed's sshd and every copy reads the library
(`tuning.source` = "library (measured ...)"). The fixed rows use no library.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from functools import lru_cache
from pathlib import Path

from benchmarks.contenders.base import AVAILABLE, Availability, Contender, ContenderFailed, missing

HAND_PICKED = {"pp": 8, "p": 4, "cc": 8}


def cli_argv() -> list[str]:
    """The installed entry point next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("airflow-transfer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "airflow_transfer.cli"]


@lru_cache(maxsize=1)
def _help() -> tuple[str, str]:
    """(help text, error) of `airflow-transfer copy --help`."""
    try:
        done = subprocess.run([*cli_argv(), "copy", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"`airflow-transfer copy --help` failed: {exc}"
    if done.returncode != 0:
        return "", f"`airflow-transfer copy --help` exited {done.returncode}: {done.stderr.strip()[-300:]}"
    return done.stdout, ""


def algorithms() -> list[str]:
    """Every value `copy --algorithm` accepts, as argparse lists them in the help."""
    text, _ = _help()
    m = re.search(r"--algorithm\s*\{([^}]*)\}", text)
    return [a.strip() for a in re.sub(r"\s+", "", m.group(1)).split(",") if a.strip()] if m else []


def sftp_url(bed, path: Path | str) -> str:
    """The testbed's sshd as the CLI's sftp:// URL for `path`."""
    return f"sftp://{bed.user}@{bed.host}:{bed.port}{path}"


def copy_argv(bed, src: str, dst: str, flags: list[str], key_prefix: str = "bench") -> list[str]:
    """One `airflow-transfer copy` as a first attempt in the testbed: a fresh journal key,
    --no-skip and --restart (never a resume of the last run), the JSON summary, no progress
    lines, and the bed's own key, known_hosts and ssh_config."""
    return [
        *cli_argv(),
        "copy",
        src,
        dst,
        *flags,
        "--json",
        "--no-skip",
        "--restart",
        "--transfer-key",
        f"{key_prefix}-{uuid.uuid4().hex}",
        "--progress-interval",
        "3600",
        *bed_ssh_flags(bed),
    ]


def bed_ssh_flags(bed) -> list[str]:
    """The testbed's client key, known_hosts and ssh_config, as the CLI takes them."""
    return ["--identity", str(bed.key), "--known-hosts", str(bed.known_hosts), "--ssh-config", str(bed.ssh_config)]


class AirflowTransfer(Contender):
    def __init__(
        self, name: str, description: str, flags: list[str], direction: str = "upload", diagnostic: bool = False
    ) -> None:
        super().__init__()
        self.name = name
        self.description = description
        self.flags = flags
        self.direction = direction
        self.diagnostic = diagnostic

    def available(self) -> Availability:
        _, error = _help()
        return missing(error) if error else AVAILABLE

    @property
    def uses_library(self) -> bool:
        return "--algorithm" in self.flags and self.flags[self.flags.index("--algorithm") + 1] != "fixed"

    def prepare(self, bed) -> None:
        super().prepare(bed)
        if self.uses_library and not getattr(bed, "at_library", None):
            bed.at_library = self._profile_link(bed)

    def _profile_link(self, bed) -> str:
        """Fills the tuning library for this link once (the profiling DAG's job); the copies
        then read it from the same default store (the testbed's HOME)."""
        argv = [
            *cli_argv(),
            "profile",
            self._url(bed.fresh_remote_dir("profile")),
            "--quick",
            "--json",
            *bed_ssh_flags(bed),
        ]
        done = bed.run(argv, timeout=600)
        if done.returncode != 0:
            # The rows still run (their summaries then say tuning.source "unknown"): a benchmark
            # of the no-library path beats no benchmark.
            print(
                f"benchmarks: `airflow-transfer profile` failed; algorithm rows run without the tuning "
                f"library: {done.tail()}",
                file=sys.stderr,
            )
            return "failed"
        print(
            f"benchmarks: tuning library filled by `airflow-transfer profile --quick` in {done.seconds:.0f} s",
            file=sys.stderr,
        )
        return done.stdout

    def _flags(self) -> list[str]:
        return self.flags if self.uses_library else [*self.flags, "--store", f"sqlite:///{self._bed().work}/fixed.db"]

    def _url(self, path: Path) -> str:
        return sftp_url(self._bed(), path)

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        bed = self._bed()
        if self.direction == "upload":
            src, dst = str(dataset_dir), self._url(remote_dir)
        else:
            src, dst = self._url(remote_dir), str(dataset_dir)
        return copy_argv(bed, src, dst, self._flags())

    def run(self, dataset_dir: Path, remote_dir: Path) -> float:
        self.last_summary: dict | None = None
        done = self.measure(self.command(dataset_dir, remote_dir))
        try:
            summary = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ContenderFailed(f"printed no JSON summary: {done.tail()}") from None
        self.last_summary = summary
        if summary.get("failed"):
            raise ContenderFailed(f"{len(summary['failed'])} files failed, e.g. {summary['failed'][0]}")
        return done.seconds


def contenders() -> list[Contender]:
    hp = HAND_PICKED
    knobs = ["--pp", str(hp["pp"]), "-p", str(hp["p"]), "-c", str(hp["cc"])]
    setting = f"pp={hp['pp']} p={hp['p']} cc={hp['cc']}"
    out: list[Contender] = [
        AirflowTransfer(
            "airflow-transfer untuned (pp=1 p=1 cc=1)",
            "one SSH connection, one file operation at a time, no range splitting",
            ["--algorithm", "fixed", "--pp", "1", "-p", "1", "-c", "1"],
        ),
        AirflowTransfer(
            f"airflow-transfer fixed ({setting})",
            f"a hand-picked fixed setting: {setting}",
            ["--algorithm", "fixed", *knobs],
            diagnostic=True,
        ),
    ]
    for algo in algorithms():
        out.append(
            AirflowTransfer(
                f"airflow-transfer --algorithm {algo}",
                f"`--algorithm {algo}` with the CLI's defaults for everything else",
                ["--algorithm", algo],
            )
        )
    # The same CLI with OpenSSH's client carrying the SSH connections instead of paramiko
    # (--ssh-client, docs/transfers.md), to compare the two on the same run.
    for algo in ("auto", "mc"):
        if algo in algorithms():
            out.append(
                AirflowTransfer(
                    f"airflow-transfer (openssh) --algorithm {algo}",
                    f"`--algorithm {algo} --ssh-client openssh`",
                    ["--algorithm", algo, "--ssh-client", "openssh"],
                    diagnostic=True,
                )
            )
    # The verification mode auto replaced as the default (file-level) for uploads: what the
    # whole-file fsync and read-back of the last files cost (docs/integrity.md, "Why `auto` picks block mode").
    if "auto" in algorithms():
        out.append(
            AirflowTransfer(
                "airflow-transfer --algorithm auto --verify-mode file",
                "`--algorithm auto` with file-level verification, the default before block",
                ["--algorithm", "auto", "--verify-mode", "file"],
                diagnostic=True,
            )
        )
    out.append(
        AirflowTransfer(
            f"airflow-transfer download ({setting})",
            f"download (dst -> src) with the hand-picked setting {setting}",
            ["--algorithm", "fixed", *knobs],
            direction="download",
        )
    )
    return out
