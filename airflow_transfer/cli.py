"""`airflow-transfer` command line (reference: docs/cli.md): the same core as the operators.

Human output goes to stderr; with --json exactly one JSON object goes to stdout.
Exit status: 0 when every file arrived, 1 when some failed, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NoReturn

from . import cmd_copy_list, cmd_profile, cmd_query
from .cli_endpoint import add_json_option, endpoint, error_object, failure_json, print_json, readable_error
from .cli_start import collector_paused, program_started
from .engine.accounting import format_line, format_rate, plural
from .engine.bundle_channel import (
    BUNDLE_ALGORITHMS,
    openssh_may_carry,
    prestart_upload_sinks,
    start_download_helpers,
    start_upload_helpers,
)
from .engine.carrier_choice import decide_for_pool
from .engine.head_start_sides import start_head_start, start_upload_head_start
from .engine.listing_ahead import listing_ahead
from .engine.local_peek import may_hold_small_files
from .engine.params import TransferParams, check_params
from .engine.retry import RetryPolicy
from .engine.switching import quick_switching
from .errors import TransferError, UsageError, describe_oserror
from .protocols.endpoint import Endpoint
from .protocols.pool import SFTPPool, warm_count
from .protocols.ssh import SSH_CLIENTS
from .summary import TransferSummary
from .tuning.names import ALGORITHM_NAMES

if TYPE_CHECKING:
    from .manifest import Manifest

# NumPy (loaded with pyarrow) starts a BLAS thread per core that spins while it waits for work this
# program never gives it: 0.06 s of CPU per run, taken from the copy on a busy host
# (docs/transfers.md, "Start and exit"). A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# pp, p, cc of `copy --algorithm fixed` when a knob is not given (the hand-picked wan50 setting's
# pp and cc: docs/tuning.md).
FIXED_DEFAULTS = (8, 1, 4)
ALGORITHMS = list(ALGORITHM_NAMES)  # every registered algorithm, in the registry's order


class BadArguments(Exception):
    """argparse refused the command line (raised instead of its exit, so --json can answer)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    # Subparsers are made of the parent's class, so every level raises instead of exiting.
    def error(self, message: str) -> NoReturn:
        raise BadArguments(self, message)


def add_tuning_options(p: argparse.ArgumentParser) -> None:
    """--algorithm, the link figures and --pp/-p/-c: one definition for `copy` and `plan`, so a
    plan shows what the same command line would copy with (resolve_tuning reads them)."""
    p.add_argument(
        "--algorithm",
        default=None,
        choices=ALGORITHMS,
        help="how pp/p/cc are chosen per chunk: auto (the default) tunes them; fixed (the default "
        "when --pp, -p or -c is given) uses them as given; see docs/tuning.md",
    )
    p.add_argument("--rtt-ms", type=float, help="round-trip time of the link, for the tuning models")
    p.add_argument("--bandwidth-mbit", type=float, help="bottleneck bandwidth of the link")
    p.add_argument("--bdp", type=int, help="bandwidth-delay product in bytes (instead of the two above)")
    p.add_argument(
        "--pp",
        type=int,
        default=None,
        help=f"file operations kept in flight per connection (fixed; default {FIXED_DEFAULTS[0]})",
    )
    p.add_argument(
        "--parallelism",
        "-p",
        type=int,
        default=None,
        help=f"connections per large file (fixed; default {FIXED_DEFAULTS[1]})",
    )
    p.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=None,
        help=f"files moved at once on separate connections (fixed; default {FIXED_DEFAULTS[2]})",
    )


def resolve_tuning(args: argparse.Namespace) -> TransferParams:
    """Settles args.algorithm and the knobs not given (FIXED_DEFAULTS); the checked knobs."""
    args.algorithm = copy_algorithm(args)
    args.pp, args.parallelism, args.concurrency = (
        given if given is not None else default
        for given, default in zip((args.pp, args.parallelism, args.concurrency), FIXED_DEFAULTS)
    )
    return check_params(args.pp, args.parallelism, args.concurrency)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="airflow-transfer", description="Tuned, verified dataset transfers.")
    sub = ap.add_subparsers(dest="command", required=True)

    def ssh_opts(p):
        p.add_argument("--identity", help="private key file for SSH")
        p.add_argument("--known-hosts", help="known_hosts file to verify host keys against")
        p.add_argument("--ssh-config", help="OpenSSH client config file (default ~/.ssh/config)")
        p.add_argument(
            "--stall-timeout",
            type=float,
            default=None,
            help="seconds an SFTP request may go unanswered before the connection is treated "
            "as lost and retried (default 120)",
        )
        p.add_argument(
            "--ssh-client",
            choices=SSH_CLIENTS,
            default=None,
            help="what carries SFTP data connections: paramiko (default), OpenSSH's ssh client "
            "(one process per connection, for CPU-bound clients), or auto (OpenSSH when the "
            "key allows it, else paramiko; docs/transfers.md)",
        )
        add_json_option(p)

    cp = sub.add_parser("copy", help="copy SRC to DST (DST is a directory root)")
    cp.add_argument("src", nargs="?")
    cp.add_argument("dst", nargs="?")
    cp.add_argument("--from-list", help="a request list: 'SRC DST' per line, grouped by host pair (docs/protocols.md)")
    add_tuning_options(cp)
    cp.add_argument("--manifest", help="copy exactly the files of this Parquet manifest")
    cp.add_argument(
        "--verify",
        default="sha256",
        help="checksum every file end to end before its final name: md5, sha1, sha256 (default), "
        "blake2b, adler32, crc32c, xxh128, blake3, or none",
    )
    cp.add_argument(
        "--verify-mode",
        default="auto",
        choices=["auto", "sequential", "file", "block"],
        help="auto (default): block for uploads, file otherwise; sequential: all transfers, then "
        "all checksums; file: each file's destination digest overlaps the transfer of the "
        "next files; block: each block is checksummed at both ends while the next is sent, "
        "only bad blocks are re-sent (uploads; docs/integrity.md)",
    )
    cp.add_argument(
        "--verify-block-size", type=int, default=None, help="block mode: bytes per checksum block (default 8 MiB)"
    )
    cp.add_argument(
        "--verify-threads",
        type=int,
        default=None,
        help="block mode: destination checksum threads (default: balanced from measured "
        "transfer and checksum time per block)",
    )
    cp.add_argument(
        "--no-bundle",
        action="store_true",
        help="move small files over SFTP one by one (both directions), not in bundles over SSH exec (docs/transfers.md)",
    )
    cp.add_argument("--no-skip", action="store_true", help="re-send files already present with same size and mtime")
    cp.add_argument("--progress-interval", type=float, default=None, help="seconds between progress lines")
    cp.add_argument(
        "--store",
        help="store URL for the journal and history (default: SQLite under $AIRFLOW_HOME or ~/.airflow-transfer)",
    )
    cp.add_argument("--transfer-key", help="journal key; a re-run with the same key resumes (default: from SRC+DST)")
    cp.add_argument(
        "--resume",
        dest="restart",
        action="store_false",
        default=False,
        help="continue from the journal of an earlier attempt (the default)",
    )
    cp.add_argument(
        "--restart",
        dest="restart",
        action="store_true",
        help="ignore the journal of earlier attempts (files already complete are still skipped)",
    )
    cp.add_argument(
        "--measure-link",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="when the tuning library has nothing for this link, measure it now (light profile + "
        "tuner); default: only when an adaptive algorithm would move 1 GiB or more blind",
    )
    cp.add_argument("--retries", type=int, default=5, help="attempts per file for transient errors")
    cp.add_argument(
        "--replica",
        action="append",
        default=[],
        help="another URL of the same source tree; files are read from every replica at once, "
        "weighted by measured throughput (repeatable; docs/protocols.md)",
    )
    cp.add_argument(
        "--alt-protocols",
        default="",
        help="fall-back protocols for the remote end, in order, e.g. ftp or ftp://user@host:2121 (docs/protocols.md)",
    )
    cp.add_argument("--switch-after", type=int, default=3, help="consecutive failures before switching protocol")
    cp.add_argument(
        "--probe-interval",
        type=float,
        default=5.0,
        help="seconds between probes of the preferred protocol while on an alternate",
    )
    cp.add_argument(
        "--deadline", type=float, default=3600.0, help="seconds after which transient errors are no longer retried"
    )
    ssh_opts(cp)

    pl = sub.add_parser("plan", help="print the chunks and pp/p/cc an algorithm chooses, moving no data")
    pl.add_argument("src", nargs="?")
    pl.add_argument("--manifest", help="plan this Parquet manifest instead of listing SRC")
    add_tuning_options(pl)
    pl.add_argument(
        "--protocol",
        default="sftp",
        choices=["sftp", "paper"],
        help="pipelining model: sftp (two control round trips per file, what `copy` uses; default) "
        "or paper (paper 000 eq. 4 as written: one)",
    )
    ssh_opts(pl)

    ls = sub.add_parser("list", help="list SRC into a Parquet manifest")
    ls.add_argument("src")
    ls.add_argument(
        "--out", required=True, help="manifest file to write (.parquet); missing parent directories are created"
    )
    ssh_opts(ls)

    cmd_profile.add_parser(sub)
    cmd_query.add_parser(sub)
    return ap


class ProgressLine:
    """Progress on stderr: on a terminal one line redrawn in place, else one line per report.

    Whatever else goes to the terminal (a log line, the summary, an error, the interrupt
    message) ends the redrawn line first, so it starts on a line of its own."""

    def __init__(self, stream: Any, tty: bool) -> None:
        self.stream, self.tty = stream, tty
        self.open = False
        self._lock = threading.Lock()

    def __call__(self, snapshot: dict) -> None:
        line = format_line(snapshot)
        with self._lock:
            if self.tty:
                self.stream.write("\r\033[K" + line)
                self.open = True
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def end(self) -> None:
        with self._lock:
            if self.open:
                self.stream.write("\n")
                self.stream.flush()
                self.open = False


def copy_algorithm(args) -> str:
    """`--algorithm`, else auto; knobs given on the command line mean the user chose them: fixed."""
    if args.algorithm:
        return args.algorithm
    return "fixed" if any(v is not None for v in (args.pp, args.parallelism, args.concurrency)) else "auto"


def _early_pool(args, src, dst):
    """An SFTP pool to the remote end with its first handshakes started, for an upload or
    download (with or without fall-back protocols: the fall-back's first phase is the same
    engine; not with replicas), or None.

    The copy path's imports (pyarrow, SQLAlchemy, the engine) take most of a second on a small
    host; the handshakes (about 12 round trips each) wait on the network meanwhile instead of
    after them. run_copy's session adopts the pool."""
    if {src.scheme, dst.scheme} != {"file", "sftp"} or args.replica:
        return None

    pool = SFTPPool((src if src.scheme == "sftp" else dst).target)
    streams = args.parallelism * args.concurrency
    bundles = not args.no_bundle and args.verify in BUNDLE_ALGORITHMS
    algorithm = None if args.verify == "none" else args.verify
    pairs = 0
    if src.scheme == "file" and bundles and may_hold_small_files(src.path):
        # An upload's small files go through a sink on the server, started now so that it is
        # ready when the chunk begins (bundle_channel.py): over OpenSSH's client, one pair per
        # data connection; else on each data connection as its handshake completes, the checksum
        # helper's included (a plan of one channel more than the warm data connections, first
        # contact on a WAN, then finds a sink ready on it). Not for a source of large files only
        # (local_peek.py): nothing would use them. Which client carries them is the link's
        # round trip's choice (carrier_choice.py): the first connection's TCP handshake tells it.
        if openssh_may_carry(pool):
            pool.warm(warm_count(args.algorithm, streams, args.verify != "none"))
            decide_for_pool(pool)
        pairs = start_upload_helpers(pool, warm_count(args.algorithm, streams, False))
        if not pairs:
            prestart_upload_sinks(pool, warm_count(args.algorithm, streams, args.verify != "none"))
    pool.warm(warm_count(args.algorithm, streams, args.verify != "none"))
    if pairs and not args.manifest:
        # The pairs move small files while this process loads the copy path (head_start.py).
        start_upload_head_start(pool, src.path, dst.path, algorithm, pairs)
    listing = None
    if dst.scheme == "file" and not args.manifest:
        # The server walks the source while this process loads the copy path (listing_ahead.py),
        # over `ssh` where the download's helpers ride it: ready sooner than a paramiko login.
        listing, _ = listing_ahead(pool, src.path, over_openssh=bundles and openssh_may_carry(pool))
    if dst.scheme == "file" and bundles:
        # A download of small files lands through helpers that take a login to start: started
        # now, one per data connection, they are ready when the first chunk begins (bundle_channel.py).
        helpers = start_download_helpers(pool, warm_count(args.algorithm, streams, False))
        if helpers and listing is not None and not args.replica:
            # And they move small files meanwhile; the first chunk adopts them (head_start.py).
            start_head_start(pool, listing, dst.path, algorithm, helpers)
    return pool


def cmd_copy(args) -> int:
    params = resolve_tuning(args)
    if bool(args.from_list) == bool(args.src and args.dst) or bool(args.src) != bool(args.dst):
        raise UsageError(
            "give SRC and DST, or --from-list FILE", "", "e.g. airflow-transfer copy ./data sftp://host/data"
        )
    if args.from_list:
        return cmd_copy_list.run(args, params)
    src, dst = endpoint(args.src, args), endpoint(args.dst, args)
    pool = _early_pool(args, src, dst)
    try:
        return _copy(args, params, src, dst, pool)
    finally:
        if pool is not None:
            pool.close()  # the session closed it already, unless the copy stopped before one existed


def _copy(args, params, src, dst, pool) -> int:
    with collector_paused():
        # heavy: job, manifest and the engine load pyarrow and NumPy (~0.3 s); --help needs none
        from .job import CopyRequest, link_from_args, run_copy
        from .manifest import Manifest

    manifest = Manifest.read(args.manifest) if args.manifest else None
    tty = sys.stderr.isatty()
    interval = args.progress_interval or (0.5 if tty else 5.0)
    progress = args.progress_line = ProgressLine(sys.stderr, tty)

    def log(line: str) -> None:
        progress.end()
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    req = CopyRequest(
        src,
        dst,
        params,
        manifest=manifest,
        skip_existing=not args.no_skip,
        progress=progress,
        progress_interval=interval,
        store_url=args.store,
        transfer_key=args.transfer_key,
        restart=args.restart,
        retry=RetryPolicy(max_attempts=args.retries, deadline_s=args.deadline),
        algorithm=args.algorithm,
        alt_protocols=[p for p in args.alt_protocols.split(",") if p.strip()],
        replicas=list(args.replica),
        switch_after=args.switch_after,
        probe_interval=args.probe_interval,
        make_endpoint=lambda url: endpoint(url, args),
        log=log,
        verify=None if args.verify == "none" else args.verify,
        verify_mode=args.verify_mode,
        verify_block_size=args.verify_block_size,
        verify_threads=args.verify_threads,
        bundle=not args.no_bundle,
        link=link_from_args(args.rtt_ms, args.bandwidth_mbit, args.bdp),
        measure_link=args.measure_link,
        pool=pool,
    )
    summary = run_copy(req)
    progress.end()
    ok = not summary["failed"]
    for f in summary["failed"]:
        f["error"] = readable_error(f["error"])
    for f in summary["failed"][:20]:
        sys.stderr.write(f"FAILED {f['path']}: {f['error']}\n")
    if len(summary["failed"]) > 20:
        sys.stderr.write(f"... and {len(summary['failed']) - 20} more failures\n")
    sys.stderr.write(
        f"{'done' if ok else 'INCOMPLETE'}: {plural(summary['files'], 'file')}, {plural(summary['bytes'], 'byte')} "
        f"in {summary['seconds']:.1f}s ({format_rate(summary['throughput_mbit'])}), "
        f"{summary['files_skipped']} already present, {summary['files_resumed']} resumed, "
        f"{summary['files_retried']} retried, {len(summary['failed'])} failed\n"
    )
    print_json(args, summary)
    return 0 if ok else 1


def cmd_plan(args) -> int:
    # heavy: job, manifest and the engine load pyarrow and NumPy (~0.3 s); --help needs none
    from .engine.transfer import TransferSession
    from .job import link_from_args, sftp_link
    from .manifest import Manifest
    from .tuning import LinkInfo, get_algorithm

    if bool(args.src) == bool(args.manifest):
        raise UsageError("give exactly one of SRC or --manifest", "", "e.g. airflow-transfer plan --manifest m.parquet")
    params = resolve_tuning(args)
    if args.manifest:
        manifest = Manifest.read(args.manifest)
    else:
        src = endpoint(args.src, args)
        with TransferSession(src, Endpoint("file", os.getcwd())) as session:
            manifest = session.list_source()
    manifest.validate()
    ordered = manifest.sorted_by_size()
    link = link_from_args(args.rtt_ms, args.bandwidth_mbit, args.bdp) or LinkInfo.unknown()
    if args.protocol == "sftp":
        link = sftp_link(link)
    # `copy` hands its knobs to fixed only; the other algorithms choose their own.
    knobs = {"pp": params.pp, "p": params.p, "cc": params.cc} if args.algorithm == "fixed" else {}
    algorithm = get_algorithm(args.algorithm, **knobs)
    specs = algorithm.plan(ordered.table, link)
    decision = getattr(algorithm, "last_decision", None)
    out = {
        "algorithm": args.algorithm,
        "files": ordered.files,
        "bytes": ordered.bytes,
        "link": {
            "rtt_ms": link.rtt_s * 1000,
            "bandwidth_mbit": link.bandwidth_bps / 1e6,
            "bdp_bytes": int(link.bdp_bytes),
            "source": link.source,
        },
        "decision": None if decision is None else {"algorithm": decision.algorithm, "reason": decision.reason},
        "chunks": [s.to_dict() for s in specs],
    }
    sys.stderr.write(
        f"{args.algorithm}: {plural(ordered.files, 'file')}, {plural(ordered.bytes, 'byte')}, "
        f"{plural(len(specs), 'chunk')} (BDP {int(link.bdp_bytes)} bytes, {link.source})\n"
    )
    if out["decision"]:
        sys.stderr.write(f"  decision: {out['decision']['algorithm']}: {out['decision']['reason']}\n")
    for s in specs:
        sys.stderr.write(
            f"  {s.id}: {plural(s.files, 'file')}, {plural(s.bytes, 'byte')}, sizes {s.min_size}-{s.max_size}, "
            f"pp={s.params.pp} p={s.params.p} cc={s.params.cc}\n"
        )
    print_json(args, out, default=str)
    return 0


def cmd_list(args) -> int:
    # heavy: job, manifest and the engine load pyarrow and NumPy (~0.3 s); --help needs none
    from .engine.transfer import TransferSession

    out = _manifest_target(args.out)
    src = endpoint(args.src, args)
    with TransferSession(src, Endpoint("file", os.getcwd())) as session:
        manifest = session.list_source()
    _write_manifest(manifest, out)
    info = {
        "manifest": os.path.abspath(args.out),
        "files": manifest.files,
        "bytes": manifest.bytes,
        "empty_dirs": len(manifest.empty_dirs),
        "skipped_entries": manifest.skipped,
    }
    sys.stderr.write(f"listed {plural(manifest.files, 'file')} ({plural(manifest.bytes, 'byte')}) into {args.out}\n")
    print_json(args, info)
    return 0


def _manifest_target(out: str) -> str:
    """`list --out` checked before the listing (a large remote tree takes a while to list): a
    file path, whose missing parent directories are created as `copy` creates a local DST."""
    todo = "give a file name, e.g. --out DIR/manifest.parquet"
    if out.endswith(os.sep) or os.path.isdir(out):
        raise UsageError("--out names a directory, not a manifest file", out, todo)
    parent = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise TransferError(
            f"cannot create the manifest's directory: {describe_oserror(exc)}",
            parent,
            "check the path and its permissions",
        ) from exc
    return out


def _write_manifest(manifest: Manifest, out: str) -> None:
    """Writes the manifest; on failure one error line and no partial file left behind."""
    try:
        manifest.write(out)
    except OSError as exc:
        # Manifest.write writes OUT.tmp first and renames it into place.
        try:
            os.unlink(f"{out}.tmp")
        except OSError:
            pass
        raise TransferError(
            f"cannot write the manifest: {describe_oserror(exc)}", out, "check the path and its permissions"
        ) from exc


def _quiet_libraries() -> None:
    """paramiko's transport thread logs tracebacks for dropped connections; the engine
    reports those failures itself, one line each, so keep library logs off the terminal."""
    for name in ("paramiko", "sqlalchemy"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    t0 = time.monotonic()
    try:
        args = _parser().parse_args(argv)
    except BadArguments as exc:
        exc.parser.print_usage(sys.stderr)
        sys.stderr.write(f"{exc.parser.prog}: error: {exc.message}\n")
        if "--json" in argv:  # the command line was refused before --json could be read as an option
            print_json(
                argparse.Namespace(json=True),
                failure_json(exc.message, {"type": "usage", "message": exc.message, "exit_code": 2}),
            )
        return 2
    _quiet_libraries()
    try:
        if args.command == "copy":
            return cmd_copy(args)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "plan":
            return cmd_plan(args)
        if args.command == "profile":
            return cmd_profile.run(args)
        if args.command == "query":
            return cmd_query.run(args)
    except TransferError as exc:
        return _failed(args, exc, readable_error(exc.message), exc.exit_code, t0)
    except ValueError as exc:  # the tuning layer's argument checks
        return _failed(args, exc, str(exc), 2, t0)
    except KeyboardInterrupt as exc:
        message = "interrupted; re-run the same command to finish (completed files are kept)"
        return _failed(args, exc, message, 130, t0)
    return 2


def _failed(args: argparse.Namespace, exc: BaseException, message: str, code: int, t0: float) -> int:
    """An error that stopped the command: one line on stderr, below any progress line, and with
    --json the command's one JSON object (docs/cli.md, "--json when a command fails")."""
    progress = getattr(args, "progress_line", None)
    if progress is not None:
        progress.end()
    sys.stderr.write(f"airflow-transfer: {'' if code == 130 else 'error: '}{message}\n")
    base = _copy_summary_base(args, time.monotonic() - t0) if args.command == "copy" else None
    print_json(args, failure_json(message, error_object(exc, message, code), base))
    return code


def _copy_summary_base(args: argparse.Namespace, seconds: float) -> dict[str, Any] | None:
    """The copy summary's fields for a copy that moved nothing (an error stopped it first), so a
    reader of `copy --json` finds the keys it always finds; None for --from-list, whose summary
    has another shape."""
    if args.from_list:
        return None
    return TransferSummary(
        "copy",
        files=0,
        bytes=0,
        seconds=seconds,
        algorithm=copy_algorithm(args),
        src=args.src or "",
        dst=args.dst or "",
    ).as_dict()


def run() -> None:
    """The `airflow-transfer` program: main(), then exit without the interpreter's teardown.

    Unloading pyarrow, NumPy, SQLAlchemy and paramiko took 0.15-0.3 s after a copy had
    finished (wan50 `large`, docs/transfers.md "Start and exit"). Every command closes its
    store, journal and connections before main returns, so only the teardown is skipped: not
    when a non-daemon thread still runs (normal exit waits for it) or an output cannot be flushed."""
    program_started()
    with quick_switching():  # from the first handshakes on: engine/switching.py says why
        rc = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        sys.exit(rc)  # the usual exit reports what went wrong with the stream
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(rc)
    os._exit(rc)


if __name__ == "__main__":
    run()
