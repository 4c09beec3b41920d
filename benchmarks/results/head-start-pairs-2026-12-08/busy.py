import os
import subprocess
import sys
import time


def busy():
    f = open("/proc/stat").readline().split()[1:]
    u, n, s, i, w, irq, sirq = (int(x) for x in f[:7])
    return (u + n + s + irq + sirq) / os.sysconf("SC_CLK_TCK"), w / os.sysconf("SC_CLK_TCK")


os.sync()
b0, w0 = busy()
t0 = time.monotonic()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t = time.monotonic() - t0
b1, w1 = busy()
print("wall %.2f machine_cpu %.2f iowait %.2f" % (t, b1 - b0, w1 - w0), file=sys.stderr)
