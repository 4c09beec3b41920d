"""A real FTP server (pyftpdlib) for tests: `python -m tests.support.ftpserver --port P --root DIR`.

Prints "READY" on stdout once listening. One user with full rights over ROOT
(paths are then the same as the host's when ROOT is "/"), optionally a second
read-only user.
"""

from __future__ import annotations

import argparse
import logging
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--root", default="/")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--ro-user")
    args = ap.parse_args()

    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

    logging.basicConfig(level=logging.WARNING)
    auth = DummyAuthorizer()
    auth.add_user(args.user, args.password, args.root, perm="elradfmwMT")
    if args.ro_user:
        auth.add_user(args.ro_user, args.password, args.root, perm="elr")
    handler = FTPHandler
    handler.authorizer = auth
    handler.use_sendfile = False
    handler.permit_foreign_addresses = True
    server = ThreadedFTPServer((args.host, args.port), handler)
    server.max_cons = 256
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    server.serve_forever(timeout=0.5)


if __name__ == "__main__":
    main()
