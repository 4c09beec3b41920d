"""Load benchmark (issue #11 item 5): 100,000 small files in one transfer, 20 transfers sharing one store.

    make bench-load                       (or: .venv/bin/python -m benchmarks.load)
    .venv/bin/python -m benchmarks.load --files 5000 --concurrent-files 50   (a quick look)

Part 1: `airflow-transfer copy` uploads N files of 1 KiB (nested in a few hundred
directories) to a real OpenSSH sshd on loopback, verification on (the default,
sha256 read back by the remote helper), then downloads them again. Each CLI runs
under /usr/bin/time -v, which gives its peak RSS; a sampler thread reads
/proc/<pid>/status (VmHWM, the kernel's own per-process peak) of every process
under the sshd and the CLI, so the server side (sshd sessions, sftp-server, the
checksum helper) is reported separately. Both trees are compared file by file.

Part 2: twenty CLI uploads start at the same moment against the same sshd and the
same store URL (SQLite file, then a fresh PostgreSQL database), each with its own
source tree; the store must then hold twenty complete transfers.

Client and server share this machine's cores, so rates are a CPU-bound ceiling,
not a network figure. Peak RSS does not depend on machine load.
Writes benchmarks/results/load.md and load.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.sshd import SSHServer, chown_to_user

KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
RSS_LIMIT = GIB  # acceptance of issue #11: the 100,000-file transfer stays under 1 GiB


# --- datasets --------------------------------------------------------------------


def generate(root: Path, files: int, size: int, dirs: int, seed: int) -> None:
    """`files` files of `size` bytes spread over `dirs` leaf directories two levels deep."""
    rng = random.Random(seed)
    top = max(1, int(dirs**0.5))
    made: set[Path] = set()
    # One random stream cut into files: generating 100 MiB costs ~0.1 s this way.
    blob = rng.randbytes(files * size) if files * size <= 512 * MIB else None
    for i in range(files):
        leaf = i % dirs
        d = root / f"g{leaf % top:03d}" / f"d{leaf:04d}"
        if d not in made:
            d.mkdir(parents=True, exist_ok=True)
            made.add(d)
        data = blob[i * size : (i + 1) * size] if blob is not None else rng.randbytes(size)
        with open(d / f"f{i:06d}.bin", "wb") as f:
            f.write(data)


def tree_hashes(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def compare_trees(src: Path, dst: Path) -> dict:
    a, b = tree_hashes(src), tree_hashes(dst)
    missing = sorted(set(a) - set(b))
    extra = sorted(set(b) - set(a))
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    return {
        "files_src": len(a),
        "files_dst": len(b),
        "missing": len(missing),
        "extra": len(extra),
        "differ": len(differ),
        "identical": not (missing or extra or differ),
        "examples": (missing + extra + differ)[:5],
    }


# --- memory sampling -------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _status(pid: int) -> tuple[str, int] | None:
    """(name, VmHWM in bytes) of a live process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    hwm = fields.get("VmHWM", "0 kB").split()[0]
    name = fields.get("Name", "?").strip()
    if name.startswith("python") and b"-c" in argv:
        name = "checksum helper (python3)"  # the remote helper is sent over SSH exec with -c
    elif name.startswith("python") and b"-" in argv:
        name = "remote lister (python3)"  # `python3 - ROOT`, the listing of a remote source
    return name, int(hwm) * KIB


@dataclass
class Sampler:
    """Peak RSS per process of a few process trees, by polling /proc (VmHWM is the kernel's high-water mark,
    so a short spike between polls is still counted as long as the process is alive at one poll)."""

    roots: dict[str, int]  # label -> root pid
    interval: float = 0.2
    peaks: dict[int, tuple[str, str, int]] = field(default_factory=dict)  # pid -> (label, name, hwm)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        children = _children_map()
        for label, root in self.roots.items():
            stack = [root]
            while stack:
                pid = stack.pop()
                stack.extend(children.get(pid, []))
                st = _status(pid)
                if st is None:
                    continue
                old = self.peaks.get(pid)
                if old is None or st[1] > old[2]:
                    self.peaks[pid] = (label, st[0], st[1])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._poll()

    def __enter__(self) -> Sampler:
        self._poll()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def by_kind(self, label: str) -> dict[str, dict]:
        """name -> {processes, max_rss_mib, sum_rss_mib} for one tree."""
        out: dict[str, dict] = {}
        for lab, name, hwm in self.peaks.values():
            if lab != label:
                continue
            d = out.setdefault(name, {"processes": 0, "max_rss_mib": 0.0, "sum_rss_mib": 0.0})
            d["processes"] += 1
            d["max_rss_mib"] = round(max(d["max_rss_mib"], hwm / MIB), 1)
            d["sum_rss_mib"] = round(d["sum_rss_mib"] + hwm / MIB, 1)
        return out


# --- running the CLI ---------------------------------------------------------------


@dataclass
class Run:
    argv: list[str]
    code: int
    seconds: float
    max_rss: int  # bytes, from /usr/bin/time
    user_s: float
    sys_s: float
    summary: dict | None
    stderr: str


def cli_argv(server: SSHServer, src: str, dst: str, store: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "airflow_transfer.cli",
        "copy",
        src,
        dst,
        "--json",
        "--store",
        store,
        "--identity",
        str(server.client_key),
        "--known-hosts",
        str(server.known_hosts),
        *extra,
    ]


def start_timed(argv: list[str], time_file: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["/usr/bin/time", "-v", "-o", str(time_file), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def finish_timed(proc: subprocess.Popen, argv: list[str], time_file: Path, t0: float, timeout: float = 7200) -> Run:
    out, err = proc.communicate(timeout=timeout)
    seconds = time.monotonic() - t0
    rusage = {}
    for line in time_file.read_text().splitlines():
        if ":" in line:
            k, v = line.rsplit(":", 1)
            rusage[k.strip()] = v.strip()
    summary = None
    if out.strip():
        try:
            summary = json.loads(out.strip().splitlines()[-1])
        except ValueError:
            summary = None
    return Run(
        argv,
        proc.returncode,
        seconds,
        int(rusage.get("Maximum resident set size (kbytes)", 0)) * KIB,
        float(rusage.get("User time (seconds)", 0)),
        float(rusage.get("System time (seconds)", 0)),
        summary,
        err,
    )


def progress_lines(stderr: str) -> int:
    return sum(1 for line in stderr.splitlines() if " files, " in line and "Mbit/s, ETA" in line)


def display_argv(argv: list[str], work: Path) -> str:
    text = " ".join(a if a != sys.executable else "python" for a in argv)
    return text.replace(str(work), "$WORK")


def machine_note() -> dict:
    load = os.getloadavg()
    try:
        mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        mem_gib = round(int(mem.split()[1]) * KIB / GIB, 1)
    except (OSError, StopIteration):
        mem_gib = None
    return {
        "host": platform.node(),
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_1_5_15": [round(x, 2) for x in load],
    }


# --- part 1: one big transfer ----------------------------------------------------------


def single_transfer(server: SSHServer, work: Path, args) -> dict:
    src = work / "src"
    print(f"generating {args.files} files of {args.size} B in {args.dirs} directories ...", file=sys.stderr)
    t0 = time.monotonic()
    generate(src, args.files, args.size, args.dirs, seed=11)
    print(f"  {time.monotonic() - t0:.1f}s", file=sys.stderr)
    remote = work / "remote"
    remote.mkdir()
    chown_to_user(remote, server.user)
    store = f"sqlite:///{work / 'single-store.db'}"
    results = {}
    legs = [
        ("upload", str(src), server.url(str(remote / "up"))),
        ("download", server.url(str(remote / "up")), str(work / "down")),
    ]
    for direction, s, d in legs:
        argv = cli_argv(server, s, d, store, *args.cli_args)
        subprocess.run(["sync"])
        print(f"{direction}: {display_argv(argv, work)}", file=sys.stderr)
        t0 = time.monotonic()
        proc = start_timed(argv, work / f"time-{direction}.txt")
        with Sampler({"client": proc.pid, "server": server.proc.pid}) as sampler:
            run = finish_timed(proc, argv, work / f"time-{direction}.txt", t0)
        if run.code != 0:
            raise SystemExit(f"{direction} failed with exit {run.code}:\n{run.stderr[-3000:]}")
        compared = compare_trees(src, remote / "up" if direction == "upload" else work / "down")
        nbytes = run.summary["bytes"]
        row = {
            "direction": direction,
            "files": run.summary["files"],
            "bytes": nbytes,
            "wall_s": round(run.seconds, 1),
            "engine_s": run.summary["seconds"],
            "files_per_s": round(run.summary["files"] / run.seconds, 1),
            "mib_per_s": round(nbytes / MIB / run.seconds, 2),
            "cli_peak_rss_mib": round(run.max_rss / MIB, 1),
            "cli_user_s": run.user_s,
            "cli_sys_s": run.sys_s,
            "server_processes": sampler.by_kind("server"),
            "progress_lines": progress_lines(run.stderr),
            "stderr_lines": len(run.stderr.splitlines()),
            "verify": run.summary.get("verify"),
            "failed": len(run.summary["failed"]),
            "trees": compared,
            "command": display_argv(argv, work),
        }
        results[direction] = row
        print(
            f"  {row['wall_s']}s, {row['files_per_s']} files/s, {row['mib_per_s']} MiB/s, "
            f"CLI peak RSS {row['cli_peak_rss_mib']} MiB, identical={compared['identical']}, "
            f"{row['progress_lines']} progress lines",
            file=sys.stderr,
        )
    return results


# --- part 2: twenty at once ----------------------------------------------------------


def concurrent_transfers(server: SSHServer, work: Path, args, backend: str, store_url: str) -> dict:
    from airflow_transfer.store import Store

    base = work / f"conc-{backend}"
    remote = base / "remote"
    remote.mkdir(parents=True)
    chown_to_user(remote, server.user)
    srcs = []
    for k in range(args.concurrent):
        src = base / f"src{k:02d}"
        generate(src, args.concurrent_files, args.size, max(1, args.concurrent_files // 50), seed=1000 + k)
        srcs.append(src)
    subprocess.run(["sync"])
    print(f"{backend}: {args.concurrent} transfers x {args.concurrent_files} files at once ...", file=sys.stderr)
    procs = []
    t0 = time.monotonic()
    for k, src in enumerate(srcs):
        argv = cli_argv(server, str(src), server.url(str(remote / f"t{k:02d}")), store_url, *args.cli_args)
        procs.append((argv, start_timed(argv, base / f"time-{k}.txt")))
    runs = [finish_timed(p, argv, base / f"time-{k}.txt", t0) for k, (argv, p) in enumerate(procs)]
    wall = time.monotonic() - t0
    failures = [(k, r.code, r.stderr[-800:]) for k, r in enumerate(runs) if r.code != 0]
    locked = sum("locked" in r.stderr for r in runs)
    identical = sum(compare_trees(src, remote / f"t{k:02d}")["identical"] for k, src in enumerate(srcs))
    with Store.open(store_url) as store:
        records = store.list_transfers(limit=1000)
        complete = 0
        for rec in records:
            states = store.file_states(rec.id)["state"].to_pylist()
            if rec.state == "succeeded" and states.count("done") == args.concurrent_files == len(states):
                complete += 1
    total_files = args.concurrent * args.concurrent_files
    total_bytes = total_files * args.size
    row = {
        "backend": backend,
        "transfers": args.concurrent,
        "files_each": args.concurrent_files,
        "succeeded": sum(r.code == 0 for r in runs),
        "lock_errors": locked,
        "identical_trees": identical,
        "store_transfers": len(records),
        "store_complete": complete,
        "wall_s": round(wall, 1),
        "files_per_s": round(total_files / wall, 1),
        "mib_per_s": round(total_bytes / MIB / wall, 2),
        "slowest_s": round(max(r.seconds for r in runs), 1),
        "fastest_s": round(min(r.seconds for r in runs), 1),
        "cli_peak_rss_mib_max": round(max(r.max_rss for r in runs) / MIB, 1),
        "load_1min_after": round(os.getloadavg()[0], 1),
        "failures": failures[:3],
        "command": display_argv(procs[0][0], work) + f"   (x{args.concurrent}, one source tree each)",
    }
    print(
        f"  {row['succeeded']}/{args.concurrent} ok, {row['store_complete']} complete in the store, "
        f"{row['wall_s']}s, {row['files_per_s']} files/s, lock errors {locked}",
        file=sys.stderr,
    )
    return row


# --- report --------------------------------------------------------------------------


def write_report(out: dict, path_md: Path) -> None:
    m = out["machine"]
    lines = [
        "# Load: 100,000 small files, and 20 transfers sharing one store",
        "",
        f"{out['date']}, {m['host']}: {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, commit `{out['commit']}`.",
        f"Load average at start {m['loadavg_1_5_15']}, at end {out['loadavg_end']}: {out['note']}",
        "",
        f"Command: `{out['command']}`",
        "",
        "Client (the `airflow-transfer` CLI) and a real OpenSSH sshd share the machine's cores over loopback, "
        "so rates are the engine's CPU-bound ceiling on small files, not a network figure. Verification on "
        "(the default: sha256 of every file read back at the destination). Peak RSS of the CLI is "
        "`/usr/bin/time -v`'s maximum resident set size; server-side figures are each process's VmHWM "
        "(kernel high-water mark) sampled from /proc every 0.2 s.",
        "",
    ]
    single = out.get("single")
    if single:
        lines += [
            f"## One transfer of {single['upload']['files']:,} files of {out['file_size']} B",
            "",
            "| direction | files | wall s | files/s | MiB/s | CLI peak RSS MiB | CLI CPU s (user+sys) "
            "| progress lines | trees identical |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in single.values():
            cpu = round(row["cli_user_s"] + row["cli_sys_s"], 1)
            lines.append(
                f"| {row['direction']} | {row['files']:,} | {row['wall_s']} | {row['files_per_s']} | "
                f"{row['mib_per_s']} | {row['cli_peak_rss_mib']} | {cpu} | {row['progress_lines']} | "
                f"{'yes' if row['trees']['identical'] else 'NO'} |"
            )
        lines += [
            "",
            "Server side, per kind of process (peak of the largest one, and the sum of all peaks):",
            "",
            "| direction | process | count | max peak RSS MiB | sum of peaks MiB |",
            "|---|---|---|---|---|",
        ]
        for row in single.values():
            for name, d in sorted(row["server_processes"].items()):
                lines.append(
                    f"| {row['direction']} | {name} | {d['processes']} | {d['max_rss_mib']} | {d['sum_rss_mib']} |"
                )
        worst = max(r["cli_peak_rss_mib"] for r in single.values())
        lines += [
            "",
            f"Acceptance (peak RSS of the transfer process under 1 GiB): {worst} MiB, "
            f"{'holds' if worst * MIB < RSS_LIMIT else 'FAILS'}.",
            "",
        ]
        for row in single.values():
            lines.append(f"- {row['direction']}: `{row['command']}`")
        lines.append("")
    conc = out.get("concurrent")
    notes: list[str] = []
    if conc:
        lines += [
            f"## {conc[0]['transfers']} transfers at once, one store",
            "",
            "Every transfer is its own CLI process with its own source tree, all started together against "
            "the same sshd and the same store URL.",
            "",
            "| store | transfers x files | succeeded | lock errors | trees identical | complete in store "
            "| wall s | files/s (all) | MiB/s (all) | fastest-slowest s | max CLI peak RSS MiB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in conc:
            if "load_1min_after" in r:
                notes.append(f"{r['backend']}: 1-minute load average {r['load_1min_after']} at the end of the run")
            lines.append(
                f"| {r['backend']} | {r['transfers']} x {r['files_each']} | {r['succeeded']} | "
                f"{r['lock_errors']} | {r['identical_trees']} | {r['store_complete']}/{r['store_transfers']} | "
                f"{r['wall_s']} | {r['files_per_s']} | {r['mib_per_s']} | {r['fastest_s']}-{r['slowest_s']} | "
                f"{r['cli_peak_rss_mib_max']} |"
            )
        lines += ["", f"Each: `{conc[0]['command']}`", ""] + [f"- {n}" for n in notes] + ([""] if notes else [])
    path_md.write_text("\n".join(lines))


def _without_note(argv: list[str]) -> list[str]:
    """The command as the report shows it: the note is printed on its own line."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--note":
            skip = True
        elif not a.startswith("--note="):
            out.append(a)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--dirs", type=int, default=400)
    ap.add_argument("--concurrent", type=int, default=20)
    ap.add_argument("--concurrent-files", type=int, default=1000)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--skip-single", action="store_true")
    ap.add_argument("--skip-concurrent", action="store_true")
    ap.add_argument("--note", default="", help="what else ran on the machine (goes into the report)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    ap.add_argument("--render", action="store_true", help="only rewrite load.md from load.json in --out")
    ap.add_argument("cli_args", nargs="*", help="extra `copy` options after --, e.g. -- -c 8")
    args = ap.parse_args()
    if args.render:
        out = json.loads((Path(args.out) / "load.json").read_text())
        write_report(out, Path(args.out) / "load.md")
        return 0
    work = Path(tempfile.mkdtemp(prefix="at-load-", dir=os.environ.get("AIRFLOW_TRANSFER_BENCH_TMP")))
    os.chmod(work, 0o755)
    machine = machine_note()
    server = SSHServer(work / "sshd").start()
    pg = None
    out: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine,
        "file_size": args.size,
        "command": shlex.join(["python", "-m", "benchmarks.load", *_without_note(sys.argv[1:])]),
        "note": args.note or "no note given",
    }
    try:
        if not args.skip_single:
            out["single"] = single_transfer(server, work, args)
        if not args.skip_concurrent:
            out["concurrent"] = []
            for backend in [b for b in args.backends.split(",") if b]:
                if backend == "sqlite":
                    url = f"sqlite:///{work / 'shared-store.db'}"
                else:
                    from tests.support.postgres import DEFAULT_ADMIN_URL, PostgresServer

                    pg = pg or PostgresServer(os.environ.get("AIRFLOW_TRANSFER_TEST_POSTGRES_URL", DEFAULT_ADMIN_URL))
                    url = pg.create_database()
                out["concurrent"].append(concurrent_transfers(server, work, args, backend, url))
    finally:
        server.stop()
        if pg is not None:
            pg.drop_all()
        shutil.rmtree(work, ignore_errors=True)
    out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    out["commit"] = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    results = Path(args.out)
    results.mkdir(parents=True, exist_ok=True)
    (results / "load.json").write_text(json.dumps(out, indent=2) + "\n")
    write_report(out, results / "load.md")
    print((results / "load.md").read_text())
    bad = [
        r
        for r in out.get("single", {}).values()
        if r["cli_peak_rss_mib"] * MIB >= RSS_LIMIT or not r["trees"]["identical"] or r["failed"]
    ]
    bad += [
        r
        for r in out.get("concurrent", [])
        if r["succeeded"] != r["transfers"]
        or r["store_complete"] != r["transfers"]
        or r["identical_trees"] != r["transfers"]
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
