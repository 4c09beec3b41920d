# Two commands for a fresh machine: `make demo` and `make test` (see README).
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: venv demo test bench bench-quick bench-loopback lock clean

venv:
	@bash scripts/bootstrap.sh

demo: venv
	@bash scripts/setup-test-deps.sh
	@$(PY) scripts/demo.py

test: venv
	@bash scripts/setup-test-deps.sh
	@if [ -f scripts/install-wan-deps.sh ]; then bash scripts/install-wan-deps.sh; fi
	@$(PY) -m pytest -q -p no:cacheprovider --timeout=900

# WAN benchmark against rclone, OpenSSH, Airflow's SFTPHook and sshfs (docs/benchmarks.md).
bench:
	@bash benchmarks/bench.sh full

bench-quick:
	@bash benchmarks/bench.sh quick

# Loopback engine benchmark (prints MiB/s; not a test).
bench-loopback: venv
	@bash scripts/setup-test-deps.sh
	@$(PY) benchmarks/loopback.py

lock:
	uv pip compile -q pyproject.toml --extra airflow --extra test -p 3.11 -o requirements.lock

clean:
	rm -rf .venv .demo
