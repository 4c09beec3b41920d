"""A finished file's verdict from its checked blocks, and the renames of the good ones.

A file is good when every block matched and the blocks cover it exactly from offset 0 (the
last block is read to the end of the file, so a longer copy fails too). Mismatching blocks are
what a repair sends again; a block whose digest could not be had fails the file. Where the
destination only has a coreutils command, the file is checked as one whole-file digest here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..integrity.algorithms import digest_file
from ..integrity.remote import RemoteChecksumError
from ..protocols.sftp_wire import SFTPWire
from .block_book import FileBlocks
from .block_source import Block
from .verify_digests import DestinationDigests
from .verify_items import Piece, VerifyItem


@dataclass
class Judgement:
    item: VerifyItem  # the file with its blocks' source digests
    bad: list[Block]  # the blocks to send again (a mismatch); empty otherwise
    error: str | None  # why the file is not good; None: rename it into place


def judge(f: FileBlocks, dest: DestinationDigests, algorithm: str) -> Judgement:
    blocks = sorted(f.blocks.values(), key=lambda b: b.offset)
    errors = [b for b in blocks if b.error is not None]
    bad = [b for b in blocks if b.state == "bad" and b.error is None]
    if dest.where == "coreutils" and not errors:
        bad = whole_file(dest, f, algorithm)
    covered = sum(b.length for b in blocks)
    item = VerifyItem(f.index, f.task.tmp, [Piece(b.offset, b.length, b.digest) for b in blocks])
    if errors:
        return Judgement(item, [], f"could not verify the destination copy: {errors[0].error}")
    if bad:
        first = bad[0]
        return Judgement(
            item,
            bad,
            f"checksum mismatch in {len(bad)} of {len(blocks)} blocks, first at "
            f"{first.offset}+{first.length}: source {algorithm}:{first.digest} "
            f"destination {algorithm}:{first.actual or '?'}",
        )
    if covered != f.task.size or (f.task.size and blocks[0].offset != 0):
        return Judgement(item, [], f"blocks cover {covered} of {f.task.size} bytes")
    return Judgement(item, [], None)


def whole_file(dest: DestinationDigests, f: FileBlocks, algorithm: str) -> list[Block]:
    """coreutils: one whole-file digest, against the source read again (the only way there)."""
    try:
        remote = dest.checksummer.digest(f.task.tmp, algorithm).digest
        local = digest_file(algorithm, f.task.src)
    except (OSError, RemoteChecksumError) as exc:
        b = Block(0, f.task.size, "", "bad")
        b.error = exc
        return [b]
    if remote == local:
        return []
    return [Block(0, f.task.size, local, "bad", remote)]


def rename_all(wire: SFTPWire | None, files: list[FileBlocks]) -> dict[int, BaseException]:
    """Renames the files into place, pipelined (one round trip for all); the errors by file index."""
    errors: dict[int, BaseException] = {}
    if wire is None:
        lost = ConnectionError("no connection to the destination to rename over")
        return {f.index: lost for f in files}
    for f in files:

        def on_reply(t, r, f=f):
            try:
                SFTPWire.expect_status(t, r, f.task.dst)
            except OSError as exc:
                errors[f.index] = exc

        try:
            wire.send_rename(f.task.tmp, f.task.dst, on_reply)
        except Exception as exc:  # noqa: BLE001 - reported per file by on_verdict
            errors[f.index] = exc
    try:
        while wire.outstanding:
            wire.pump(block=True)
    except Exception as exc:  # noqa: BLE001 - the connection died with renames in flight
        for f in files:
            errors.setdefault(f.index, exc)
    return errors
