cd /tmp/h
# ab.sh REPS : interleaved pulls, base (14ed981) vs working tree vs rsync; wall + machine cpu
I=/tmp/h/info.json
j() { python3 -c "import json;print(json.load(open('$I'))['$1'])"; }
for r in $(seq 1 $1); do
  for who in base new rsync; do
    n=$(date +%s%N); dst=/tmp/h/work/ab-$who-$n
    if [ $who = rsync ]; then
      cmd=(rsync -a -e "ssh -p $(j port) -i $(j key) -o UserKnownHostsFile=$(j kh) -o StrictHostKeyChecking=yes -o BatchMode=yes" $(j user)@127.0.0.1:$(j src)/ $dst/)
      out=$(python3 /tmp/h/busy.py "${cmd[@]}" 2>&1)
    else
      pp=""; [ $who = base ] && pp=${BASE:-/tmp/base}
      out=$(PYTHONPATH=$pp python3 /tmp/h/busy.py /work/main/.venv/bin/python -c "import sys; sys.argv[0]='airflow-transfer'; from airflow_transfer.cli import run; sys.exit(run())" copy "$(j url)" $dst --identity $(j key) --known-hosts $(j kh) --store sqlite:////tmp/h/work/store-$who.db --restart 2>&1)
    fi
    echo "$who $r $out files=$(find $dst -type f | wc -l)"
  done
done
