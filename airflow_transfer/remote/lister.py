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


def walk(root, out):
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            entries = list(os.scandir(path))
        except OSError as exc:
            emit(out, ["e", rel, errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)])
            continue
        if rel and not entries:
            emit(out, ["D", rel, os.lstat(path).st_mtime])
        for entry in entries:
            child = rel + "/" + entry.name if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                emit(out, ["e", child, errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)])
                continue
            if stat.S_ISLNK(st.st_mode):
                emit(out, ["l", child])
            elif stat.S_ISDIR(st.st_mode):
                stack.append(child)
            elif stat.S_ISREG(st.st_mode):
                emit(out, ["f", child, st.st_size, st.st_mtime, stat.S_IMODE(st.st_mode)])
            else:
                emit(out, ["o", child])


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: lister.py ROOT\n")
        return 2
    run(argv[1], sys.stdout)
    sys.stdout.flush()
    return 0


def run(root, out):
    try:
        st = os.stat(root)
    except OSError as exc:
        emit(out, ["r", "missing", errno.errorcode.get(exc.errno, "EIO"), exc.strerror or str(exc)])
        return 0
    if stat.S_ISDIR(st.st_mode):
        emit(out, ["r", "dir"])
        walk(root, out)
    else:
        emit(out, ["r", "file"])
        emit(out, ["f", os.path.basename(root), st.st_size, st.st_mtime, stat.S_IMODE(st.st_mode)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
