"""Whether a local upload source may hold files small enough for bundles, judged before the
copy lists it.

The command line starts an upload's bundle helpers with its first handshakes, before the
copy path has loaded (bundle_channel.prestart_upload_sinks): each is a local interpreter and
a remote one, about 0.05 s of CPU apiece on the two cores that are importing the engine
meanwhile. A copy of a few large files never uses them. This peek looks at the source's top
level only, so it stays a few system calls: it says no only where it can be sure (a large
file, or a directory holding nothing but large files); anything else may hold small files,
and a wrong guess costs only the time to start a helper when the first bundle needs it.
"""

from __future__ import annotations

import os
import stat

# Files up to this size travel in bundles (engine/bundle.py reads it from here).
BUNDLE_MAX_FILE = 1 << 20
PEEK_ENTRIES = 256  # a directory with more entries than this is assumed to hold small files


def may_hold_small_files(path: str, limit: int = BUNDLE_MAX_FILE) -> bool:
    """False only for a regular file larger than `limit`, or a directory whose entries (at most
    PEEK_ENTRIES) are all regular files larger than it, or none; True otherwise (a
    subdirectory, a link, a special file, more entries, an error)."""
    try:
        st = os.stat(path)
    except OSError:
        return True  # the copy itself reports what is wrong with the source
    if stat.S_ISREG(st.st_mode):
        return st.st_size <= limit
    if not stat.S_ISDIR(st.st_mode):
        return True
    try:
        with os.scandir(path) as entries:
            for n, entry in enumerate(entries):
                if n >= PEEK_ENTRIES or not entry.is_file(follow_symlinks=False):
                    return True
                if entry.stat(follow_symlinks=False).st_size <= limit:
                    return True
    except OSError:
        return True
    return False
