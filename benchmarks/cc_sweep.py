"""An oracle sweep of channel counts: benchmarks.run with one fixed row per cc.

    python -m benchmarks.cc_sweep --ccs 1,2,3,4,8 --profile lan --datasets tiny --reps 3 \\
        --contenders "airflow-transfer --algorithm auto,rsync,airflow-transfer sweep" --out DIR

Adds rows named `airflow-transfer sweep cc=N` (`--algorithm fixed --pp 8 -p 1 -c N`, no
tuning library; with `--no-bundle`, the same rows again with small files sent one by one over
SFTP, `airflow-transfer sweep cc=N --no-bundle`; with `--downloads`, download rows `airflow-transfer download sweep cc=N` and
`airflow-transfer download auto`) to benchmarks.run's contenders and runs it with the other arguments, so
the fixed settings are interleaved with `auto` and rsync on the same link, and the best of
them (the oracle) is what a tuning rule is checked against (docs/tuning.md).
"""

from __future__ import annotations

import argparse
import sys

import benchmarks.run as run
from benchmarks.contenders import all_contenders
from benchmarks.contenders.airflow_transfer import AirflowTransfer
from benchmarks.contenders.base import Contender


def sweep_rows(ccs: list[int], downloads: bool = False, no_bundle: bool = False) -> list[Contender]:
    """One fixed row per channel count (and with `no_bundle`, one more per count with small
    files sent one by one over SFTP); for downloads, also `auto` (benchmarks.run has no
    download row that reads the tuning library)."""
    direction, prefix = ("download", "airflow-transfer download") if downloads else ("upload", "airflow-transfer")
    variants = [("", [])] + ([(" --no-bundle", ["--no-bundle"])] if no_bundle else [])
    rows: list[Contender] = [
        AirflowTransfer(
            f"{prefix} sweep cc={cc}{tag}",
            f"{direction}, fixed: pp 8, p 1, cc {cc}{tag} (an oracle sweep's row)",
            ["--algorithm", "fixed", "--pp", "8", "-p", "1", "-c", str(cc), *extra],
            direction,
        )
        for tag, extra in variants
        for cc in ccs
    ]
    if downloads:
        rows.insert(
            0, AirflowTransfer(f"{prefix} auto", "download, --algorithm auto", ["--algorithm", "auto"], direction)
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    ap.add_argument("--ccs", default="1,2,3,4,8", help="channel counts, comma-separated (default 1,2,3,4,8)")
    ap.add_argument(
        "--downloads",
        action="store_true",
        help="download rows instead: `airflow-transfer download auto` and `airflow-transfer download sweep cc=N`",
    )
    ap.add_argument(
        "--no-bundle",
        action="store_true",
        help="add a row per channel count with --no-bundle (`airflow-transfer sweep cc=N --no-bundle`)",
    )
    args, rest = ap.parse_known_args(argv)
    try:
        ccs = [int(x) for x in args.ccs.split(",") if x.strip()]
    except ValueError:
        print(f"benchmarks.cc_sweep: --ccs takes whole numbers separated by commas (got {args.ccs!r})")
        return 2
    if not ccs or min(ccs) < 1:
        print(f"benchmarks.cc_sweep: --ccs needs channel counts of at least 1 (got {args.ccs!r})")
        return 2
    rows = sweep_rows(ccs, args.downloads, args.no_bundle)
    run.all_contenders = lambda: [*all_contenders(), *rows]  # what benchmarks.run selects from
    return run.main(rest)


if __name__ == "__main__":
    sys.exit(main())
