import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, "/work/main")
from benchmarks.small_files import _make
from tests.support.sshd import SSHServer

work = Path("/tmp/h/work")
work.mkdir(exist_ok=True)
os.chmod(work, 0o755)
sshd = SSHServer(work / "sshd").start()
src = work / "src"
if not src.exists():
    _make(src, 2000, 65536)
os.chmod(work, 0o755)
info = dict(
    port=sshd.port,
    key=str(sshd.client_key),
    kh=str(sshd.known_hosts),
    user=sshd.user,
    host=sshd.host,
    url=sshd.url(str(src)),
    src=str(src),
)
Path("/tmp/h/info.json").write_text(json.dumps(info))
print(info, flush=True)
while True:
    time.sleep(3600)
