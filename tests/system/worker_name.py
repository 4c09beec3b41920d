"""[core] hostname_callable for the system test: both Celery workers run on one machine,
so each reports the name in AT_WORKER_NAME and task instances show which worker ran them."""

from __future__ import annotations

import os
import socket


def get() -> str:
    return os.environ.get("AT_WORKER_NAME") or socket.getfqdn()
