"""The chaos runner: transfers over the emulated wan50 link, one fault each, invariants after.

    with Chaos(ChaosConfig(seed=7)) as chaos:
        for i, kind in enumerate(schedule(7, 21)):
            record = chaos.run_one(i, kind)

Each run copies the dataset to a fresh remote directory with `airflow-transfer
copy` (benchmarks/chaos/driver.py) in the link's src namespace, to the real
sshd in dst, journaled in its own SQLite store. A fault is injected at a random
moment (a seeded fraction of the bytes at the destination); failed attempts are
re-run with the same transfer key after the fault is undone, as Airflow retries
a task. The invariants (invariants.py) are checked after every attempt and after
the final one. Needs root (namespaces, tmpfs), like the WAN tests.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from airflow_transfer.engine.bundle import BUNDLE_MAX_FILE
from benchmarks.chaos import invariants as inv
from benchmarks.chaos.faults import KINDS, Attempt, parse_progress, reported
from tests.support.data import write_random
from tests.support.sshd import chown_to_user
from tests.support.wan import REPO_ROOT, WanTestbed

MiB = 1024 * 1024
RANGE_SPLIT = 8 * MiB  # engine/resume.py RANGE_MIN: files of >= 2 x RANGE_MIN are split over p connections
BLOCK = 1 * MiB  # --verify-block-size in block mode


@dataclass
class ChaosConfig:
    seed: int = 20261122
    rtt_ms: float = 50.0
    rate_mbit: float = 100.0
    small_files: int = 32
    big_mib: float = 12.5  # one file split over p ranges (p-split and block digests exercised)
    mid_files: int = 1  # a few MiB each
    p: int = 3
    cc: int = 4
    pp: int = 8
    max_reruns: int = 3  # Airflow retries after the faulted attempt
    outage_s: tuple[float, float] = (2.0, 5.0)  # blackhole length
    cut_s: tuple[float, float] = (3.0, 5.0)  # rate-cut length
    attempt_timeout: float = 240.0


def schedule(seed: int, faults: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """`faults` kinds, every kind equally often (+-1), in a seeded random order."""
    kinds = [kinds[i % len(kinds)] for i in range(faults)]
    random.Random(seed).shuffle(kinds)
    return kinds


def run_session(
    chaos: Chaos,
    faults: int,
    on_record: Callable[[dict, int, int], None] | None = None,
    max_extra: int | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> list[dict]:
    """Runs until `faults` faults were injected: a run whose copy ended before its fault's
    moment is repeated with the same kind (at most `max_extra` such repeats in all)."""
    todo = schedule(chaos.cfg.seed, faults, kinds)
    extra = max_extra if max_extra is not None else max(5, faults // 4)
    records: list[dict] = []
    while todo:
        kind = todo.pop(0)
        rec = chaos.run_one(len(records), kind).to_dict()
        records.append(rec)
        if on_record is not None:
            on_record(rec, len(records), len(records) + len(todo))
        if not rec["injected"] and extra > 0:
            extra -= 1
            todo.insert(0, kind)
    return records


def _not_injected(detail: dict) -> str:
    if detail.get("files_pending") is False:
        return "not injected (every file was under its final name when the server went down)"
    return "not injected (the copy ended first)"


@dataclass
class RunRecord:
    """One run as written to chaos.json: its fault, attempts, whether reported, violations."""

    run: int
    kind: str
    injected: bool
    detail: dict
    attempts: list[dict]
    reported: bool
    how: str
    completed: bool
    violations: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class _Running:
    """One copy process; stderr lines are timestamped as they arrive (progress lines)."""

    def __init__(self, proc: subprocess.Popen, out_path: Path) -> None:
        self.proc, self.out_path = proc, out_path
        self.t0 = time.monotonic()
        self.lines: list[str] = []
        self.progress: list[tuple[float, int]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            sample = parse_progress(line)
            if sample is not None:
                self.progress.append(sample)
            else:
                self.lines.append(line)

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float, killed: bool = False) -> Attempt:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.lines.append(f"chaos: attempt hung for {timeout:.0f}s and was killed\n")
            killed = True
        self._reader.join(timeout=10)
        seconds = time.monotonic() - self.t0
        summary = None
        text = self.out_path.read_text() if self.out_path.exists() else ""
        if text.strip():
            try:
                summary = json.loads(text.strip().splitlines()[-1])
            except json.JSONDecodeError:
                summary = None
        return Attempt(
            None if killed else self.proc.returncode, seconds, summary, "".join(self.lines), list(self.progress)
        )


class Chaos:
    """A testbed (link + sshd), a dataset, a small tmpfs, and the runs."""

    def __init__(self, cfg: ChaosConfig, log=None) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.work: Path | None = None
        self.fs: Path | None = None
        self.tb: WanTestbed | None = None

    # -- set up / tear down -------------------------------------------------------
    def __enter__(self) -> Chaos:
        if os.geteuid() != 0:
            raise RuntimeError("the chaos suite needs root (network namespaces, tmpfs): run it as root, as CI does")
        self.work = Path(tempfile.mkdtemp(prefix="at-chaos-"))
        os.chmod(self.work, 0o755)
        try:
            self.src = self.work / "src"
            self.source = self._make_dataset()
            self.total = sum(s for s, _ in self.source.values())
            (self.work / "stores").mkdir()
            # The sshd runs under `ip netns exec`, which copies the mount table when it starts and
            # (mounts here being private) sees no later mount: the tmpfs must exist first.
            self.fs = self.work / "fs"
            self.fs.mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self._fs_big()},mode=0755", "tmpfs", str(self.fs)], check=True
            )
            self.tb = WanTestbed.start(rtt_ms=self.cfg.rtt_ms, rate_mbit=self.cfg.rate_mbit)
            chown_to_user(self.fs, self.tb.sshd.user)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.tb is not None:
                self.tb.close()
        finally:
            if self.fs is not None and os.path.ismount(self.fs):
                subprocess.run(["umount", "-l", str(self.fs)], check=False)
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)

    def _fs_big(self) -> int:
        return 4 * self.total + 16 * MiB

    def _make_dataset(self) -> dict[str, tuple[int, str]]:
        rng = random.Random(self.cfg.seed)
        cfg = self.cfg
        for i in range(cfg.small_files):
            size = (
                0
                if i == 0
                else int(rng.choice([rng.uniform(1, 8192), rng.uniform(8192, 262144), rng.uniform(262144, 640 * 1024)]))
            )
            write_random(self.src / f"d{i % 4}" / f"s{i:03d}.dat", size, seed=cfg.seed * 1000 + i)
        for i in range(cfg.mid_files):
            write_random(self.src / "mid" / f"m{i}.bin", int(rng.uniform(1.5, 3.5) * MiB), seed=cfg.seed + 7 + i)
        write_random(self.src / "big" / "huge.bin", int(cfg.big_mib * MiB) + 12345, seed=cfg.seed + 3)
        os.chmod(self.src, 0o755)
        return inv.digests(self.src)

    # -- one copy attempt -----------------------------------------------------------
    def _start(self, dst: Path, store: str, key: str, mode: str, env: dict | None = None) -> _Running:
        sshd = self.tb.sshd
        out = self.work / f"out-{time.monotonic_ns()}.json"
        argv = [
            sys.executable,
            "-m",
            "benchmarks.chaos.driver",
            "copy",
            str(self.src),
            sshd.url(str(dst)),
            "--identity",
            str(sshd.client_key),
            "--known-hosts",
            str(sshd.known_hosts),
            "--pp",
            str(self.cfg.pp),
            "-p",
            str(self.cfg.p),
            "-c",
            str(self.cfg.cc),
            "--verify-mode",
            mode,
            "--store",
            store,
            "--transfer-key",
            key,
            "--json",
            "--progress-interval",
            "0.5",
            "--deadline",
            "120",
        ]
        if mode == "block":
            argv += ["--verify-block-size", str(BLOCK)]
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        with open(out, "w") as stdout:
            proc = self.tb.link.run_in(
                "src",
                argv,
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                env=full_env,
                cwd=REPO_ROOT,
                start_new_session=True,
            )
        return _Running(proc, out)

    def _wait_moment(self, run: _Running, dst: Path, frac: float, need_final: bool = False) -> bool:
        """Waits until `frac` of the bytes are at the destination; False when the copy ended first."""
        want = frac * self.total
        while run.running():
            have, finals = 0, 0
            for d, _, names in os.walk(dst):
                for n in names:
                    try:
                        have += os.stat(os.path.join(d, n)).st_size
                    except OSError:
                        continue
                    finals += not inv.is_temp(n)
            if have >= want and (finals or not need_final):
                return run.running()
            time.sleep(0.02)
        return False

    def _check_attempt(self, dst: Path, store: str, key: str) -> tuple[list[inv.Violation], set[str], str | None]:
        bad, good = inv.check_destination(self.source, dst)
        state, done = inv.journal_done(store, key)
        bad += inv.check_journal(done, good)
        return bad, good, state

    # -- the fault kinds -------------------------------------------------------------
    def _restart_sshd(self, down_s: float, dst: Path) -> bool:
        """Kills and restarts the server; True when the copy still had files to finish when it went down."""
        sshd = self.tb.sshd
        before = sshd.log_text().count("Server listening")
        sshd.stop()
        # Stopping takes a moment; on a loaded machine the copy can rename its last file in
        # it, and a server lost after the last remote step leaves nothing to report.
        pending = any(not (dst / rel).exists() for rel in self.source)
        time.sleep(down_s)
        sshd.start()
        deadline = time.monotonic() + 15
        # start() returns once the log says "listening", which an earlier start already wrote.
        while sshd.log_text().count("Server listening") <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        return pending

    def _pending_dir(self, dst: Path) -> str | None:
        """The source subdirectory with the most files not yet under their final name at `dst`."""
        pending: dict[str, int] = {}
        for rel in self.source:
            if not (dst / rel).exists():
                pending[os.path.dirname(rel)] = pending.get(os.path.dirname(rel), 0) + 1
        pending.pop("", None)
        return max(pending, key=lambda d: (pending[d], d)) if pending else None

    def run_one(self, index: int, kind: str) -> RunRecord:
        """One transfer with one fault of `kind`, its re-runs, and the invariants."""
        t_run = time.monotonic()
        rng = random.Random(f"{self.cfg.seed}-{index}")
        mode = rng.choice(["file", "block"])
        key = f"chaos-{index}"
        store = f"sqlite:///{self.work / 'stores' / f'run-{index}.db'}"
        base = self.fs if kind == "disk_full" else self.tb.base / "remote"
        parent = base / f"run-{index}"
        parent.mkdir(parents=True)
        os.chmod(parent.parent, 0o755)
        chown_to_user(parent, self.tb.sshd.user)
        dst = parent / "data"
        # The moment: a fraction of the dataset's bytes at the destination. A rate cut needs
        # time left to show; the others may land anywhere, verification and renames included.
        frac = rng.uniform(0.05, 0.6 if kind == "rate_cut" else 0.95)
        detail: dict = {"verify_mode": mode, "at_fraction": round(frac, 3)}
        env: dict = {}
        injected = False
        restore = None
        if kind == "disk_full":
            used = shutil.disk_usage(self.fs).used
            size = used + int(rng.uniform(0.15, 0.8) * self.total)
            subprocess.run(["mount", "-o", f"remount,size={size}", str(self.fs)], check=True)
            detail["fs_bytes"] = size - used
            detail["at_fraction"] = round((size - used) / self.total, 3)
            injected = True
        elif kind == "byte_flip":
            candidates = [r for r, (s, _) in self.source.items() if s > 0 and (mode == "file" or s < RANGE_SPLIT)]
            victim = rng.choice(sorted(candidates))
            tmp = dst / os.path.dirname(victim) / f".{os.path.basename(victim)}.atpart"
            env = {"AT_CHAOS_FLIP": str(tmp), "AT_CHAOS_FLIP_AT": f"{rng.random():.6f}"}
            if self.source[victim][0] <= BUNDLE_MAX_FILE:
                env["AT_CHAOS_FLIP_BUNDLE"] = "1"  # small files travel in bundles: flipped there
                detail["path"] = "bundle"
            elif mode == "block":
                env["AT_CHAOS_FLIP_LIMIT"] = str(BLOCK)
            detail["victim"] = victim
        run = self._start(dst, store, key, mode, env)
        attempts: list[Attempt] = []
        violations: list[inv.Violation] = []
        if kind in ("sshd_restart", "blackhole", "sigkill", "permission", "rate_cut"):
            if self._wait_moment(run, dst, frac, need_final=kind == "sigkill"):
                detail["t_fault"] = time.monotonic()
                if kind == "sshd_restart":
                    detail["seconds"] = round(rng.uniform(0.3, 3.0), 2)
                    detail["files_pending"] = self._restart_sshd(detail["seconds"], dst)
                elif kind == "blackhole":
                    detail["seconds"] = round(rng.uniform(*self.cfg.outage_s), 2)
                    self.tb.link.blackhole(detail["seconds"])
                elif kind == "sigkill":
                    os.kill(run.proc.pid, signal.SIGKILL)
                elif kind == "permission":
                    sub = self._pending_dir(dst)
                    if sub is not None:
                        target = dst / sub
                        target.mkdir(parents=True, exist_ok=True)
                        chown_to_user(dst, self.tb.sshd.user)
                        os.chmod(target, 0o555)
                        detail["dir"] = sub
                        restore = lambda t=target: os.chmod(t, 0o755)
                        # Files of `sub` may have been named between the scan and the chmod (a
                        # group's commit): the fault bites only if one is still without its name.
                        detail["files_pending"] = any(
                            os.path.dirname(rel) == sub and not (dst / rel).exists() for rel in self.source
                        )
                elif kind == "rate_cut":
                    detail["seconds"] = round(rng.uniform(*self.cfg.cut_s), 2)
                    detail["cut_mbit"] = round(self.cfg.rate_mbit * rng.uniform(0.02, 0.06), 1)
                    self.tb.link.set(rate_mbit=detail["cut_mbit"])
                    time.sleep(detail["seconds"])
                    self.tb.link.set(rate_mbit=self.cfg.rate_mbit)
                injected = (kind != "permission" or "dir" in detail) and detail.get("files_pending", True)
        attempts.append(run.finish(self.cfg.attempt_timeout, killed=kind == "sigkill" and injected))
        if kind == "byte_flip":
            injected = "chaos: flipped the byte" in attempts[0].stderr
        # Undo the fault, as an operator (or time) would, before any retry.
        if restore is not None:
            restore()
        if kind == "disk_full":
            subprocess.run(["mount", "-o", f"remount,size={self._fs_big()}", str(self.fs)], check=True)
        bad, good, state = self._check_attempt(dst, store, key)
        violations += bad
        while not attempts[-1].ok and len(attempts) <= self.cfg.max_reruns:
            attempts.append(self._start(dst, store, key, mode).finish(self.cfg.attempt_timeout))
            bad, good, state = self._check_attempt(dst, store, key)
            violations += bad
        completed = attempts[-1].ok
        if completed:
            violations += inv.check_complete(self.source, dst, good)
            _, done = inv.journal_done(store, key)
            if state != "succeeded" or done != set(self.source):
                violations.append(
                    inv.Violation(
                        "journal",
                        "",
                        f"after the final run the journal says {state!r} "
                        f"with {len(done)}/{len(self.source)} files done",
                    )
                )
        else:
            violations.append(
                inv.Violation(
                    "incomplete", "", f"no success after {len(attempts)} attempts: {attempts[-1].stderr.strip()[-300:]}"
                )
            )
        ok, how = reported(kind, attempts, detail) if injected else (True, _not_injected(detail))
        detail.pop("t_fault", None)
        record = RunRecord(
            index,
            kind,
            injected,
            detail,
            [a.to_dict() for a in attempts],
            ok,
            how,
            completed,
            [v.to_dict() for v in violations],
            round(time.monotonic() - t_run, 2),
        )
        shutil.rmtree(parent, ignore_errors=True)
        return record
