#!/usr/bin/env bash
# Prints the fastest of the CPython 3.11 interpreters given as arguments (by default every
# python3.11 on PATH, /usr/bin/python3.11 and /usr/local/bin/python3.11), as given; nothing
# when none runs. Each runs a short loop of the kind of work a copy does per file (an
# object, a JSON header written and parsed), timed in CPU seconds; the candidates take turns,
# five rounds, and each keeps its best, so a burst of other work on the machine (apt installing
# while the venv is built) slows every candidate alike instead of deciding. The times go to
# stderr. Builds differ widely, and PATH may find the slow one first (docs/quickstart.md,
# "Which Python the venv uses").
set -uo pipefail
if [ "$#" -eq 0 ]; then
  set -- $(type -ap python3.11) /usr/bin/python3.11 /usr/local/bin/python3.11
fi
probe='
import json, time
class Task:
    __slots__ = ("path", "size", "mtime")
    def __init__(self, path, size, mtime):
        self.path, self.size, self.mtime = path, size, mtime
t0 = time.process_time()
for i in range(30000):
    t = Task("d%04d/f%06d" % (i // 100, i), i * 7 % 4096, i * 1.5)
    head = f"{{\"id\":{i:d},\"path\":{json.dumps(t.path)},\"size\":{t.size:d},\"mtime\":{t.mtime!r}}}"
    json.loads(head)["size"]
print(f"{time.process_time() - t0:.4f}")'
declare -A seen=() best_of=()
cands=()
for cand in "$@"; do
  path="$(command -v "$cand" 2>/dev/null)" || continue
  real="$(readlink -f "$path")"
  [ -z "${seen[$real]:-}" ] || continue
  seen[$real]=1
  "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null || continue
  cands+=("$cand")
done
for _ in 1 2 3 4 5; do
  for cand in "${cands[@]}"; do
    t="$("$cand" -c "$probe" 2>/dev/null)" || continue
    if [ -z "${best_of[$cand]:-}" ] || awk "BEGIN { exit !($t < ${best_of[$cand]}) }"; then
      best_of[$cand]="$t"
    fi
  done
done
best="" best_t=""
for cand in "${cands[@]}"; do
  t="${best_of[$cand]:-}"
  [ -n "$t" ] || continue
  echo "pick-python: $cand: $t CPU s on the probe" >&2
  if [ -z "$best" ] || awk "BEGIN { exit !($t < $best_t) }"; then
    best="$cand" best_t="$t"
  fi
done
[ -n "$best" ] && echo "$best"
exit 0
