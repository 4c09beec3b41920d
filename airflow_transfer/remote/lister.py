"""Remote lister: walks a tree with os.scandir and streams one JSON record per entry.

Standard library only (python3 >= 3.6): it is piped over SSH exec as
`python3 - ROOT` and runs nothing else. One exec replaces a round trip per
directory batch of SFTP readdir, which dominates listing on long-RTT links.

Records (one JSON array per line):
  ["r", root_kind]                       first line: "dir", "file" or "missing"
  ["f", rel, size, mtime, mode]          regular file
  ["d", rel, mtime]                      directory (with no entries: "D")
  ["l", rel]                             symlink, not followed
  ["o", rel]                             other (socket, fifo, device): skipped
  ["e", rel, errno_name, message]        could not read this entry/directory
Names are sent as surrogate-escaped UTF-8 so nothing is lost or reinterpreted;
the client validates every name before using it.
"""

import errno
import json
import os
import stat
import sys


def emit(out, rec):
    out.write(json.dumps(rec, ensure_ascii=True))
    out.write("\n")


def fs_text(name):
    # Undecodable bytes survive the round trip as lone surrogates.
    return name if isinstance(name, str) else os.fsdecode(name)


def walk_tree(root):
    """The records of the entries under directory `root`, parents before their children."""
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            entries = list(os.scandir(path))
        except OSError as exc:
            yield ["e", rel, errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)]
            continue
        if rel and not entries:
            yield ["D", rel, os.lstat(path).st_mtime]
        for entry in entries:
            child = rel + "/" + entry.name if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                yield ["e", child, errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)]
                continue
            mode = st.st_mode
            if stat.S_ISREG(mode):
                yield ["f", child, st.st_size, st.st_mtime, stat.S_IMODE(mode)]
            elif stat.S_ISDIR(mode):
                stack.append(child)
            elif stat.S_ISLNK(mode):
                yield ["l", child]
            else:
                yield ["o", child]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: lister.py ROOT\n")
        return 2
    run(argv[1], sys.stdout)
    sys.stdout.flush()
    return 0


def run(root, out):
    for rec in records(root):
        emit(out, rec)
    return 0


def records(root):
    """Every record of the listing of `root`, the first one saying what root is. The client
    lists its own trees with this too, without the JSON (the same walk, nothing to parse)."""
    try:
        st = os.stat(root)
    except OSError as exc:
        yield ["r", "missing", errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)]
        return
    if stat.S_ISDIR(st.st_mode):
        yield ["r", "dir"]
        yield from walk_tree(root)
    else:
        yield ["r", "file"]
        yield ["f", os.path.basename(root), st.st_size, st.st_mtime, stat.S_IMODE(st.st_mode)]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
