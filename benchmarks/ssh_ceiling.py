"""Where the SSH tools' ceiling on the emulated link sits: raw streams, no files, no disk.

    .venv/bin/python -m benchmarks.ssh_ceiling [--profile wan50] [--mib 200] [--reps 3]

Every SSH tool on wan50 stays near 280-345 Mbit/s while iperf3 fills the link
(docs/tuning.md). This separates the layers: it pushes zeros from `src` to a
`cat > /dev/null` on the testbed's sshd in `dst`, so neither files, SFTP nor
disks are involved, and compares

* iperf3, 1 and 4 TCP streams (the link without SSH),
* OpenSSH's `ssh` client, 1, 2 and 4 connections (each its own process),
* paramiko (the engine's SSH layer), 1, 2 and 4 connections as threads of one
  process, as the engine runs them, and 4 connections as 4 processes.

Runs are interleaved, `--reps` times; the medians go to
benchmarks/results/ssh-ceiling.{json,md}. Rates count from the first byte
written to the remote command's exit, connection setup excluded. Needs root
(namespaces); run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RESULTS = REPO / "benchmarks" / "results"

# One paramiko process: opens `n` connections (threads), waits until all are
# authenticated, then streams `mib` MiB on each and prints the wall time of the
# streaming phase only.
_PARAMIKO = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from airflow_transfer.protocols.ssh import SSHTarget, open_transport
host, port, user, key, kh, n, mib = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7]), int(sys.argv[8])
chans = []
for _ in range(n):
    t = open_transport(SSHTarget(host=host, port=port, username=user, key_filenames=[key], known_hosts=[kh]))
    c = t.open_session(window_size=16 << 20)
    c.exec_command("cat > /dev/null")
    chans.append(c)
block = bytes(256 << 10)
def push(c):
    for _ in range(mib * 4):
        c.sendall(block)
    c.shutdown_write()
    c.recv_exit_status()
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t0 = time.monotonic()
ths = [threading.Thread(target=push, args=(c,)) for c in chans]
[x.start() for x in ths]; [x.join() for x in ths]
print(time.monotonic() - t0)
"""

# One OpenSSH connection: connect first (a `read` holds the stream until the
# parent says go), so setup stays out of the timed part.
_OPENSSH_REMOTE = "cat > /dev/null"


class Ceiling:
    def __init__(self, bed, mib: int) -> None:
        self.bed, self.mib = bed, mib

    def _ssh_argv(self) -> list[str]:
        b = self.bed
        return ["ssh", *b.ssh_options(), "-c", "aes128-gcm@openssh.com", "-p", str(b.port), f"{b.user}@{b.host}"]

    def openssh(self, n: int) -> float:
        """n `ssh` processes; each reads a go-line from its stdin pipe before the zeros follow."""
        b = self.bed
        procs = [
            b.link.run_in(
                "src",
                [*self._ssh_argv(), f"read go; {_OPENSSH_REMOTE}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(n)
        ]
        time.sleep(1.5)  # key exchange and auth on every connection (about 4 RTT each)
        block = bytes(256 << 10)
        t0 = time.monotonic()

        def push(p):
            p.stdin.write(b"go\n")
            for _ in range(self.mib * 4):
                p.stdin.write(block)
            p.stdin.close()
            p.wait()

        ths = [threading.Thread(target=push, args=(p,)) for p in procs]
        [t.start() for t in ths]
        [t.join() for t in ths]
        return n * self.mib * 8 * 1.048576 / (time.monotonic() - t0)

    def paramiko(self, conns: int, procs: int = 1) -> float:
        b = self.bed
        argv = [
            sys.executable,
            "-c",
            _PARAMIKO,
            str(REPO),
            b.host,
            str(b.port),
            b.user,
            str(b.key),
            str(b.known_hosts),
            str(conns),
            str(self.mib),
        ]
        ps = [
            b.link.run_in("src", argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)
        ]
        for p in ps:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("paramiko helper did not connect")
        t0 = time.monotonic()
        for p in ps:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in ps:
            p.communicate(timeout=600)
        return procs * conns * self.mib * 8 * 1.048576 / (time.monotonic() - t0)

    def iperf3(self, streams: int) -> float:
        server = self.bed.link.run_in("dst", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            out = self.bed.link.run(
                "src", ["iperf3", "-c", self.bed.host, "-t", "8", "-O", "2", "-P", str(streams), "-J"], timeout=60
            ).stdout
        finally:
            server.wait(timeout=10)
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


CASES = {
    "iperf3, 1 TCP stream": lambda c: c.iperf3(1),
    "iperf3, 4 TCP streams": lambda c: c.iperf3(4),
    "OpenSSH ssh, 1 connection": lambda c: c.openssh(1),
    "OpenSSH ssh, 2 connections (2 processes)": lambda c: c.openssh(2),
    "OpenSSH ssh, 4 connections (4 processes)": lambda c: c.openssh(4),
    "paramiko, 1 connection": lambda c: c.paramiko(1),
    "paramiko, 2 connections (threads of 1 process)": lambda c: c.paramiko(2),
    "paramiko, 4 connections (threads of 1 process)": lambda c: c.paramiko(4),
    "paramiko, 4 connections (4 processes)": lambda c: c.paramiko(1, procs=4),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="wan50")
    ap.add_argument("--mib", type=int, default=200, help="MiB per connection (default 200)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from benchmarks.contenders.testbed import Testbed
    from benchmarks.run import busy_cores, machine_cpu
    from benchmarks.wan.link import PROFILES

    rate = PROFILES[args.profile][1]
    runs: dict[str, list[dict]] = {name: [] for name in CASES}
    with Testbed(args.profile) as bed:
        c = Ceiling(bed, args.mib)
        for rep in range(1, args.reps + 1):
            for name, case in CASES.items():
                emu0, cpu0 = bed.emulator_cpu(), machine_cpu()
                t0 = time.monotonic()
                mbit = case(c)
                wall = time.monotonic() - t0
                rec = {
                    "mbit": round(mbit, 1),
                    "machine_busy_cores": busy_cores(cpu0, machine_cpu()),
                    "emulator_cores": round((bed.emulator_cpu() - emu0) / wall, 2),
                }
                runs[name].append(rec)
                print(
                    f"[rep {rep}/{args.reps}] {name}: {mbit:.0f} Mbit/s ({mbit / rate:.0%} of link), "
                    f"machine busy {rec['machine_busy_cores']} cores",
                    flush=True,
                )
    rows = [
        {
            "case": name,
            "median_mbit": statistics.median(r["mbit"] for r in rs),
            "min_mbit": min(r["mbit"] for r in rs),
            "max_mbit": max(r["mbit"] for r in rs),
            "machine_busy_cores": statistics.median(r["machine_busy_cores"] for r in rs),
            "runs": rs,
        }
        for name, rs in runs.items()
    ]
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "profile": args.profile,
        "mib_per_connection": args.mib,
        "reps": args.reps,
        "command": "python -m benchmarks.ssh_ceiling " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ssh-ceiling.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    lines = [
        f"# SSH ceiling on {args.profile}: raw streams to `cat > /dev/null`, no files, no disk",
        "",
        f"- command: `{meta['command']}`; {meta['date']}, commit `{commit}`",
        f"- {args.mib} MiB per connection, {args.reps} interleaved repetitions, medians (min-max); "
        "connection setup excluded",
        "",
        "| case | Mbit/s | of link | machine busy (cores of 2) |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['median_mbit']:.0f} ({r['min_mbit']:.0f}-{r['max_mbit']:.0f}) | "
            f"{r['median_mbit'] / rate:.0%} | {r['machine_busy_cores']} |"
        )
    (args.out / "ssh-ceiling.md").write_text("\n".join(lines) + "\n")
    print(f"benchmarks.ssh_ceiling: wrote {args.out / 'ssh-ceiling.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
