"""Interoperability: `airflow-transfer copy` against SFTP servers other than OpenSSH (make interop).

    make interop                                  (or: .venv/bin/python -m benchmarks.interop)
    .venv/bin/python -m benchmarks.interop --servers rclone,forcecommand --scenarios 'download-*-kill9' --quick

Servers (tests/support/interop_servers.py; installed by scripts/install-interop-deps.sh):
rclone serve sftp (default VFS, no cache), asyncssh (SFTP only, exec refused, "/" mapped
to a directory), ProFTPD mod_sftp, dropbear + OpenSSH's sftp-server, OpenSSH sshd with
ForceCommand internal-sftp + ChrootDirectory, and plain OpenSSH sshd. Each runs on
127.0.0.1 with generated keys; the CLI always checks the host key (--known-hosts).

Dataset: seeded, generated once per run: 200 files from 0 B to 20 MiB (sizes drawn
lognormally, one empty file, a few of 8-20 MiB so -p 4 splits them into ranges),
nested directories, names with spaces and non-ASCII characters.

Matrix per server: direction {upload, download} x mode {defaults, -p 4, --verify-mode
block, --verify-mode file, --verify none} x {clean, kill -9 mid-copy then re-run}. A
cell passes when the last run exits 0 within 60 s and the destination holds exactly the
dataset's files, byte for byte (sha256 computed here, on both sides), with no temporary
file left. Each cell has its own store (SQLite), shared by the killed run and its re-run.

Writes benchmarks/results/interop.md and interop.json; exits 1 when any cell fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from airflow_transfer.paths import TEMP_SUFFIX
from tests.support.interop_servers import (
    SERVERS,
    InteropServer,
    ServerUnavailable,
    make_server,
    prepare_probe,
    probe,
)
from tests.support.sshd import chown_to_user

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MIB = 1024 * 1024
CAP_S = 60.0  # a run longer than this is a failed cell (and is killed)
KILL_FRACTION = 0.3  # kill -9 once this share of the bytes has landed...
KILL_FALLBACK_S = 1.5  # ...or this long after the first byte landed, whichever comes first
DIRECTIONS = ("upload", "download")
MODES = {
    "defaults": [],
    "p4": ["-p", "4"],
    "verify-block": ["--verify-mode", "block"],
    "verify-file": ["--verify-mode", "file"],
    "verify-none": ["--verify", "none"],
    "verify-md5": ["--verify", "md5"],  # rclone computes md5 itself (a bare md5sum over exec)
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- dataset -----------------------------------------------------------------------------------
@dataclass
class Dataset:
    root: Path
    files: dict[str, tuple[int, str]]  # relative path -> (size, sha256)

    @property
    def bytes(self) -> int:
        return sum(s for s, _ in self.files.values())

    def describe(self) -> str:
        sizes = sorted(s for s, _ in self.files.values())
        big = sum(1 for s in sizes if s >= 8 * MIB)
        return (
            f"{len(sizes)} files, {self.bytes / MIB:.1f} MiB ({sizes[0]} B to {sizes[-1] / MIB:.1f} MiB, "
            f"median {sizes[len(sizes) // 2] / 1024:.1f} KiB, {big} of 8 MiB or more), "
            f"{len({os.path.dirname(p) for p in self.files})} directories"
        )


DIRS = [
    "",
    "a",
    "a/b",
    "a/b/c/d",
    "données/été 2024",
    "with space",
    "with space/and more",
    "日本語/データ",
    "deep/1/2/3/4/5",
]


def _names(count: int, rng: random.Random) -> list[str]:
    out = ["données/été 2024/file ü.bin"]
    stems = ["file", "naïve", "résumé", "two  spaces", "ü", "Ωmega", "x"]
    i = 0
    while len(out) < count:
        d = DIRS[i % len(DIRS)]
        name = f"{rng.choice(stems)} {i:03d}.{rng.choice(['bin', 'dat', 'txt'])}"
        out.append(f"{d}/{name}" if d else name)
        i += 1
    return out


def dataset_sizes(count: int, big: list[int], seed: int) -> list[int]:
    """`count` sizes: one 0 B file, the `big` ones, the rest lognormal (median 16 KiB), capped at 20 MiB."""
    rng = random.Random(seed)
    sizes = [0, *big]
    while len(sizes) < count:
        sizes.append(min(20 * MIB, int(rng.lognormvariate(math.log(16 * 1024), 2.0))))
    rng.shuffle(sizes)
    return sizes[:count]


def make_dataset(root: Path, count: int = 200, big: list[int] | None = None, seed: int = 2024) -> Dataset:
    """Generates the dataset under `root` (seeded: same seed, same bytes)."""
    big = big if big is not None else [8 * MIB + 12345, 13 * MIB, 20 * MIB]
    rng = random.Random(seed)
    names = _names(count, rng)
    files = {}
    for i, (rel, size) in enumerate(zip(names, dataset_sizes(count, big, seed), strict=True)):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = random.Random(seed * 100_003 + i).randbytes(size)
        path.write_bytes(data)
        files[rel] = (size, hashlib.sha256(data).hexdigest())
    for d, _, names_ in os.walk(root):
        os.chmod(d, 0o755)
        for n in names_:
            os.chmod(os.path.join(d, n), 0o644)
    return Dataset(root, files)


def tree(root: Path) -> tuple[dict[str, str], list[str]]:
    """(relative path -> sha256 of every file but temporary ones, temporary files' paths)."""
    digests, temps = {}, []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if n.endswith(TEMP_SUFFIX):
                temps.append(rel)
                continue
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
            digests[rel] = h.hexdigest()
    return digests, sorted(temps)


def landed_bytes(root: Path) -> int:
    """Bytes written under `root` so far (allocated blocks: a preallocated or sparse file counts what it holds)."""
    total = 0
    for d, _, names in os.walk(root):
        for n in names:
            try:
                st = os.lstat(os.path.join(d, n))
            except OSError:
                continue
            total += min(st.st_size, st.st_blocks * 512)
    return total


def place_dataset(server: InteropServer, dataset: Dataset, rel: str) -> None:
    """A copy of the dataset in the server's directory, owned by its login user (download source).

    Call it before server.start(): rclone does not see files added behind its back for
    minutes (its VFS caches directory listings)."""
    dst = server.local(rel)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(dataset.root, dst)
    chown_to_user(dst, server.user)


# -- one cell ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    direction: str
    mode: str
    kill: bool

    @property
    def name(self) -> str:
        return f"{self.direction}-{self.mode}-{'kill9' if self.kill else 'clean'}"

    @property
    def args(self) -> list[str]:
        return list(MODES[self.mode])


ALL_SCENARIOS = [Scenario(d, m, k) for d in DIRECTIONS for m in MODES for k in (False, True)]


def select_scenarios(patterns: str | None) -> list[Scenario]:
    """Scenarios whose name matches one of the comma-separated patterns (fnmatch, or a part of the name)."""
    if not patterns:
        return list(ALL_SCENARIOS)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [
        s for s in ALL_SCENARIOS if any(fnmatch.fnmatch(s.name, p) or fnmatch.fnmatch(s.name, f"*{p}*") for p in pats)
    ]


def cli() -> list[str]:
    exe = Path(sys.executable).with_name("airflow-transfer")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "airflow_transfer.cli"]


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _error_lines(text: str, n: int = 3) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    flagged = [ln for ln in lines if any(w in ln.lower() for w in ("error", "failed", "traceback", "exception"))]
    return [ln[:400] for ln in (flagged or lines)[-n:]]


def run_cell(
    server: InteropServer,
    scenario: Scenario,
    dataset: Dataset,
    work: Path,
    remote_src: str,
    cap: float = CAP_S,
    keep: bool = False,
) -> dict:
    """One transfer of `dataset` with `server` as `scenario` says; returns the cell's record.

    `remote_src` is where place_dataset put the download source (relative to the server's
    data directory). The destination is made empty first and removed afterwards (unless
    `keep`).
    """
    tag = f"{server.name}-{scenario.name}"
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    store = work / "stores" / f"{tag}.db"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    if scenario.direction == "upload":
        rel = f"up-{scenario.name}"
        dest = server.make_dir(rel)
        src, dst = str(dataset.root), server.url(rel)
    else:
        dest = work / "downloads" / tag
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        src, dst = server.url(remote_src), str(dest)
    cmd = [*cli(), "copy", src, dst, "--json", "--store", f"sqlite:///{store}", *server.cli_args(), *scenario.args]
    env = {**os.environ, "AIRFLOW_HOME": str(work / "airflow-home"), "PYTHONPATH": str(REPO)}
    rec: dict = {
        "server": server.name,
        "scenario": scenario.name,
        "direction": scenario.direction,
        "mode": scenario.mode,
        "kill": scenario.kill,
        "command": shlex.join(cmd[len(cli()) :]),
    }
    try:
        if scenario.kill:
            rec["first_run"] = _killed_run(cmd, env, dest, dataset.bytes, cap, logs / f"{tag}.first.err")
        t0 = time.monotonic()
        err_path = logs / f"{tag}.err"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
            try:
                out, _ = proc.communicate(timeout=cap)
                rec["timed_out"] = False
            except subprocess.TimeoutExpired:
                _killpg(proc)
                out, _ = proc.communicate()
                rec["timed_out"] = True
        rec["seconds"] = round(time.monotonic() - t0, 2)
        rec["exit"] = proc.returncode
        stderr = err_path.read_text(errors="replace")
        summary = {}
        try:
            summary = json.loads(out.decode(errors="replace") or "{}")
        except ValueError:
            rec["stdout_tail"] = out.decode(errors="replace")[-300:]
        rec["verify_where"] = (summary.get("verify") or {}).get("where", "") if isinstance(summary, dict) else ""
        rec["verify_why"] = (summary.get("verify") or {}).get("why", "") if isinstance(summary, dict) else ""
        rec["server_caps"] = summary.get("server") if isinstance(summary, dict) else None
        for k in ("files_copied", "files_skipped", "files_failed", "bytes_copied"):
            if isinstance(summary, dict) and k in summary:
                rec[k] = summary[k]
        got, temps = tree(dest)
        want = {p: d for p, (_, d) in dataset.files.items()}
        missing = sorted(want.keys() - got.keys())
        extra = sorted(got.keys() - want.keys())
        differ = sorted(p for p in want.keys() & got.keys() if want[p] != got[p])
        rec["identical"] = not missing and not extra and not differ and not temps
        rec["missing"], rec["extra"], rec["differ"], rec["temps"] = (len(missing), len(extra), len(differ), len(temps))
        rec["examples"] = [
            *(f"missing {p}" for p in missing[:3]),
            *(f"extra {p}" for p in extra[:3]),
            *(f"differs {p}" for p in differ[:3]),
            *(f"temporary {p}" for p in temps[:3]),
        ]
        if rec["timed_out"]:
            last = [ln.strip() for ln in stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            rec["error"] = [f"still running after {cap:.0f} s, killed; its last line: {last[0][:300]}"]
        elif rec["exit"] != 0 or not rec["identical"]:
            rec["error"] = _error_lines(stderr)
    except Exception as exc:  # noqa: BLE001 - a broken cell is reported, the matrix goes on
        rec.setdefault("exit", None)
        rec.setdefault("seconds", None)
        rec["identical"] = False
        rec["error"] = [f"harness: {type(exc).__name__}: {exc}"]
    finally:
        if not keep:
            shutil.rmtree(dest, ignore_errors=True)
    rec["ok"] = cell_ok(rec, cap)
    return rec


def cell_ok(rec: dict, cap: float = CAP_S) -> bool:
    return (
        bool(rec.get("identical"))
        and rec.get("exit") == 0
        and not rec.get("timed_out")
        and rec.get("seconds") is not None
        and rec["seconds"] <= cap
        and not (rec.get("first_run") or {}).get("timed_out")
    )


def _killed_run(cmd: list[str], env: dict, dest: Path, total: int, cap: float, err_path: Path) -> dict:
    """Starts the copy, SIGKILLs its process group once some (not all) bytes have landed."""
    threshold = max(1, int(total * KILL_FRACTION))
    t0 = time.monotonic()
    first_byte = None
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    out: dict = {"timed_out": False}
    while True:
        now = time.monotonic()
        if proc.poll() is not None:
            out.update(
                killed=False, note=f"copy finished (exit {proc.returncode}) before the kill", exit=proc.returncode
            )
            break
        landed = landed_bytes(dest)
        if landed and first_byte is None:
            first_byte = now
        if landed >= threshold or (first_byte is not None and now - first_byte >= KILL_FALLBACK_S):
            _killpg(proc)
            out.update(killed=True, note=f"killed at {landed / MIB:.1f} of {total / MIB:.1f} MiB", landed=landed)
            break
        if now - t0 > cap:
            _killpg(proc)
            out.update(killed=True, timed_out=True, note=f"nothing landed for {cap:.0f} s ({landed} B); killed")
            break
        time.sleep(0.02)
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


# -- report -------------------------------------------------------------------------------------
def _mark(rec: dict) -> str:
    if rec.get("ok"):
        return "ok"
    if rec.get("timed_out") or (rec.get("first_run") or {}).get("timed_out"):
        return "TIMEOUT"
    if rec.get("exit") not in (0, None):
        return f"FAIL(exit {rec['exit']})"
    return "FAIL"


def cell_line(rec: dict) -> str:
    secs = "-" if rec.get("seconds") is None else f"{rec['seconds']:.1f}"
    kill = (rec.get("first_run") or {}).get("note", "")
    line = (
        f"{rec['server']:12s} {rec['scenario']:28s} identical={str(rec.get('identical')):5s} "
        f"exit={str(rec.get('exit')):4s} {secs:>5s}s verify.where={rec.get('verify_where') or '-'}"
        + (f" [{kill}]" if kill else "")
    )
    if not rec.get("ok"):
        line += (
            f"  {_mark(rec)}"
            + "".join(f"\n      {e}" for e in rec.get("examples", [])[:3])
            + "".join(f"\n      {e}" for e in rec.get("error", [])[:3])
        )
    return line


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summarize_probe(p: dict) -> dict:
    """probe()'s findings in a few words each (the report's server table)."""
    if "error" in p and "exec_md5sum_b" not in p:
        return {"exec": f"probe failed: {p['error']}", "read": "", "write_ahead": "", "extensions": ""}
    execs = {k: p.get(k, "") for k in ("exec_md5sum_b", "exec_md5sum_bare", "exec_sha256sum", "exec_python3")}
    if all(v.startswith("refused") for v in execs.values()):
        exec_ = "refused"
    elif any("sftp connections only" in v for v in execs.values()):
        exec_ = "sftp only (ForceCommand: every command runs internal-sftp)"
    elif execs["exec_md5sum_b"].startswith("exit 0") and execs["exec_python3"].startswith("exit 0"):
        exec_ = "yes (a shell: md5sum -b, sha256sum, python3)"
    else:
        label = {
            "exec_md5sum_b": "md5sum -b -- PATH",
            "exec_md5sum_bare": "md5sum PATH",
            "exec_sha256sum": "sha256sum PATH",
            "exec_python3": "python3",
        }
        ok = [label[k] for k, v in execs.items() if v.startswith("exit 0")]
        bad = [label[k] for k, v in execs.items() if not v.startswith("exit 0")]
        exec_ = f"only {', '.join(ok) or 'nothing'} ({', '.join(bad)} fail: no shell)"
    ow = p.get("offset_write", {})
    ahead = ow.get("ahead", "")
    write_ahead = (
        "ok"
        if ahead == "ok" and ow.get("bytes_right")
        else f"{ahead} after {ow.get('ahead_seconds')} s"
        if ahead
        else ""
    )
    exts = ", ".join(e.split("=")[0].replace("@openssh.com", "@o") for e in p.get("extensions", []))
    return {"exec": exec_, "read": f"{p.get('read_1m_returns', '')} B", "write_ahead": write_ahead, "extensions": exts}


def write_report(out_dir: Path, meta: dict, servers: dict, cells: list[dict]) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "interop.json").write_text(
        json.dumps({"meta": meta, "servers": servers, "cells": cells}, indent=1, ensure_ascii=False) + "\n"
    )
    names = [s for s in meta["servers"]]
    scen = [s for s in meta["scenarios"]]
    by = {(c["server"], c["scenario"]): c for c in cells}
    failed = [c for c in cells if not c.get("ok")]
    lines = [
        "# Interoperability: airflow-transfer against other SFTP servers",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['started']} · duration {meta['duration_s'] / 60:.1f} min · commit {meta['commit'][:12]}"
        f"{' (uncommitted changes)' if meta.get('dirty') else ''}  ",
        f"Machine: {meta['machine']}  ",
        f"Dataset: {meta['dataset']} (seed {meta['seed']})  ",
        f"A cell passes when the last run exits 0 within {meta['cap_s']:.0f} s and the destination holds exactly "
        "the dataset (sha256 of every file, computed by the harness on both sides; no temporary file left). "
        "kill9: SIGKILL to the CLI's process group once "
        f"{KILL_FRACTION:.0%} of the bytes landed (or {KILL_FALLBACK_S} s after the first byte), then the same "
        "command again, same store.",
        "",
        f"**Result: {'PASS' if not failed else 'FAIL'}** — {len(cells) - len(failed)} of {len(cells)} cells pass.",
        "",
        "## Servers",
        "",
        "What each server answered to a probe before the cells (`@o` = `@openssh.com`): exec of `md5sum -b -- "
        "PATH`, `md5sum PATH`, `sha256sum PATH` and `python3`; how many bytes one 1 MiB READ returns; a 64 KiB "
        "WRITE at offset 64 KiB into an empty file (what a parallel range writer sends).",
        "",
        "| server | version | exec | one READ of 1 MiB returns | WRITE ahead of EOF | SFTP v3 extensions |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        s = servers.get(name, {})
        if s.get("unavailable"):
            lines.append(f"| {name} | unavailable: {_md_escape(s['unavailable'])} | | | | |")
            continue
        p = summarize_probe(s.get("probe", {}))
        lines.append(
            f"| {name} | {_md_escape(s.get('version', ''))} | {_md_escape(p['exec'])} | {p['read']} | "
            f"{_md_escape(p['write_ahead'])} | {_md_escape(p['extensions'])} |"
        )
    lines += ["", "## Matrix", "", "| scenario | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for sc in scen:
        row = []
        for name in names:
            c = by.get((name, sc))
            if c is None:
                row.append("not run")
                continue
            secs = "" if c.get("seconds") is None else f" {c['seconds']:.1f}s"
            row.append(f"{_mark(c)}{secs}")
        lines.append(f"| {sc} | " + " | ".join(row) + " |")
    if failed:
        lines += ["", "## Failures", ""]
        for c in failed:
            lines.append(
                f"- **{c['server']} {c['scenario']}**: {_mark(c)}, identical={c.get('identical')} "
                f"(missing {c.get('missing', '?')}, extra {c.get('extra', '?')}, differ "
                f"{c.get('differ', '?')}, temporary {c.get('temps', '?')})"
                + (f"; first run: {c['first_run']['note']}" if c.get("first_run") else "")
            )
            for e in c.get("examples", [])[:3] + c.get("error", [])[:3]:
                lines.append(f"    - `{_md_escape(e)[:300]}`")
    lines += [
        "",
        "## Cells",
        "",
        "| server | scenario | identical | exit | verify.where | seconds | kill -9 |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        secs = "-" if c.get("seconds") is None else f"{c['seconds']:.1f}"
        lines.append(
            f"| {c['server']} | {c['scenario']} | {c.get('identical')} | {c.get('exit')} | "
            f"{_md_escape(c.get('verify_where') or '-')} | {secs} | "
            f"{_md_escape((c.get('first_run') or {}).get('note', ''))} |"
        )
    text = "\n".join(lines) + "\n"
    (out_dir / "interop.md").write_text(text)
    return text


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.interop", description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated (default: all: {','.join(SERVERS)})")
    ap.add_argument(
        "--scenarios",
        default=None,
        help="comma-separated patterns on scenario names such as upload-p4-clean, download-*-kill9, "
        "verify-none (default: all 20)",
    )
    ap.add_argument("--quick", action="store_true", help="40 files (two of 8 and 17 MiB) instead of 200")
    ap.add_argument("--files", type=int, default=None, help="number of files (default 200, --quick 40)")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--cap", type=float, default=CAP_S, help="seconds a run may take (default 60)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for interop.md / interop.json")
    ap.add_argument("--work", type=Path, default=None, help="scratch directory (default: a new one in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, stores)")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = sorted(set(names) - set(SERVERS))
    if unknown or not names:
        ap.error(f"unknown server(s) {', '.join(unknown) or '(none given)'}: use {', '.join(SERVERS)}")
    scenarios = select_scenarios(args.scenarios)
    if not scenarios:
        ap.error(f"no scenario matches {args.scenarios!r}: names are like {ALL_SCENARIOS[0].name}")

    from benchmarks.run import commit, machine

    work = args.work or Path(tempfile.mkdtemp(prefix="at-interop-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    count = args.files or (40 if args.quick else 200)
    big = [8 * MIB + 12345, 17 * MIB] if args.quick else [8 * MIB + 12345, 13 * MIB, 20 * MIB]
    t0 = time.monotonic()
    dataset = make_dataset(work / "dataset", count, big, args.seed)
    say(f"interop: dataset {dataset.describe()} in {time.monotonic() - t0:.1f} s; work dir {work}")
    dirty = bool(
        subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    )
    given = list(argv if argv is not None else sys.argv[1:])
    cmd = "make interop" + (f" INTEROP_ARGS={shlex.quote(shlex.join(given))}" if given else "")
    meta = {
        "command": cmd,
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "dirty": dirty,
        "machine": machine(),
        "dataset": dataset.describe(),
        "files": len(dataset.files),
        "bytes": dataset.bytes,
        "seed": args.seed,
        "cap_s": args.cap,
        "servers": names,
        "scenarios": [s.name for s in scenarios],
    }
    servers: dict[str, dict] = {}
    cells: list[dict] = []
    try:
        for name in names:
            info: dict = {}
            servers[name] = info
            server = None
            try:
                server = make_server(name, work / "servers" / name)
                # Files go in before the server starts: rclone's VFS caches directory listings
                # (--dir-cache-time, 5 min), so it would not see what is added behind its back.
                if any(s.direction == "download" for s in scenarios):
                    place_dataset(server, dataset, "source")
                prepare_probe(server)
                server.start()
                info["version"] = server.version
                info["probe"] = probe(server)
                say(
                    f"interop: {name} {server.version} on port {server.port}: "
                    f"{json.dumps(info['probe'], ensure_ascii=False)}"
                )
                for sc in scenarios:
                    rec = run_cell(server, sc, dataset, work, "source", cap=args.cap)
                    cells.append(rec)
                    say(cell_line(rec))
            except (ServerUnavailable, RuntimeError) as exc:
                info["unavailable"] = str(exc)[:600]
                say(f"interop: {name} cannot run here: {exc}")
                done = {c["scenario"] for c in cells if c["server"] == name}
                for sc in scenarios:
                    if sc.name not in done:
                        cells.append(
                            {
                                "server": name,
                                "scenario": sc.name,
                                "direction": sc.direction,
                                "mode": sc.mode,
                                "kill": sc.kill,
                                "identical": False,
                                "exit": None,
                                "seconds": None,
                                "ok": False,
                                "error": [f"server unavailable: {str(exc)[:300]}"],
                            }
                        )
            finally:
                if server is not None:
                    server.stop()
                    server.cleanup()
    finally:
        meta["duration_s"] = time.monotonic() - t0
        text = write_report(args.out, meta, servers, cells)
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(text)
    failed = [c for c in cells if not c.get("ok")]
    say(
        f"interop: {len(cells) - len(failed)}/{len(cells)} cells pass, {meta['duration_s'] / 60:.1f} min "
        f"-> {args.out / 'interop.md'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
