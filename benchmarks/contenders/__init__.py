"""The tools airflow-transfer is compared with, each a small class (base.Contender).

    from benchmarks.contenders import all_contenders, select
    chosen = select(all_contenders(), "all")           # or "airflow-transfer,rclone,OpenSSH sftp"

Selection is by comma-separated, case-insensitive prefixes of the row names,
or group names: `airflow-transfer`, `rclone`, `openssh` (sftp, scp, rsync),
`airflow` (the SFTPHook rows), `sshfs`, `lftp`, `uploads`, `downloads`,
`matrix` and `wide`.

`matrix` is the set `make bench` runs on every profile and dataset (MATRIX):
airflow-transfer's `auto` and every other tool that came within 25 % of the
best row in any cell of the 2026-11-25 matrix (benchmarks/results/matrix-2026-11-25/:
every other upload tool it ran came that close somewhere), plus lftp.
`wide` is that earlier, wider matrix's selection: every contender but the
diagnostic ones (which explain another row: a second SSH client, file-level
verification, another worker count), with every algorithm, the untuned row and
the download rows.
"""

from __future__ import annotations

from benchmarks.contenders import airflow_transfer, lftp, libraries, openssh, rclone
from benchmarks.contenders.base import Availability, Contender, ContenderFailed, Usage, verify_tree

__all__ = [
    "MATRIX",
    "Availability",
    "Contender",
    "ContenderFailed",
    "Usage",
    "all_contenders",
    "select",
    "verify_tree",
]

GROUPS = {
    "openssh": ("OpenSSH", "rsync"),
    "airflow": ("Airflow SFTPHook",),
    "sshfs": ("fsspec sshfs", "sshfs one"),
}

# Row names, exactly. The rule and the report it was applied to: tests/test_bench_matrix.py.
MATRIX = (
    "airflow-transfer --algorithm auto",
    "rclone defaults (4 transfers, hash check on)",
    "rclone --transfers 4 chunk 255k (hash check off)",
    "rclone --transfers 16 chunk 255k (hash check off)",
    "rclone --transfers 32 chunk 255k (hash check off)",
    "rclone --transfers 16 chunk 255k (hash check on)",
    "OpenSSH sftp -b (put -r)",
    "OpenSSH scp -r",
    "rsync -a -e ssh",
    "Airflow SFTPHook.store_directory_concurrently (8 workers, compression off)",
    "fsspec sshfs put (file list)",
    f"lftp mirror -R --parallel={lftp.PARALLEL} --use-pget-n={lftp.PGET_N}",
)


def all_contenders() -> list[Contender]:
    """Every contender, in the order rows are run and reported (airflow-transfer's algorithms found now)."""
    return [
        *airflow_transfer.contenders(),
        *rclone.contenders(),
        *openssh.contenders(),
        *libraries.contenders(),
        *lftp.contenders(),
    ]


def select(contenders: list[Contender], spec: str) -> list[Contender]:
    """The contenders `spec` names (see the module docstring); raises ValueError for a name that matches none."""
    if spec.strip().lower() in ("", "all"):
        return list(contenders)
    chosen: list[Contender] = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        lw = word.lower()
        if lw == "matrix":
            hits = [c for c in contenders if c.name in MATRIX]
        elif lw == "wide":
            hits = [c for c in contenders if not c.diagnostic]
        elif lw == "uploads":
            hits = [c for c in contenders if c.direction == "upload"]
        elif lw == "downloads":
            hits = [c for c in contenders if c.direction == "download"]
        else:
            prefixes = GROUPS.get(lw, (word,))
            hits = [c for c in contenders if c.name.lower().startswith(tuple(p.lower() for p in prefixes))]
        if not hits:
            names = "; ".join(c.name for c in contenders)
            raise ValueError(f"--contenders: {word!r} matches no contender; names: {names}")
        chosen.extend(c for c in hits if c not in chosen)
    return chosen
