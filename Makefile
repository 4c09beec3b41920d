# Two commands for a fresh machine: `make demo` and `make test` (see README).
SHELL := /bin/bash
PY := .venv/bin/python
TEST_WORKERS ?= 3

.PHONY: venv demo test docs bench bench-quick bench-loopback bench-query bench-generalize lock clean system-test chaos interop

venv:
	@bash scripts/bootstrap.sh

demo: venv
	@bash scripts/setup-test-deps.sh
	@$(PY) scripts/demo.py

test:
	@bash scripts/test-setup.sh
	@bash scripts/run-tests.sh

# Docs site into site/ (MkDocs, strict: any warning fails; tests/test_docs.py runs the same build).
docs: venv
	@$(PY) -m mkdocs build --strict --clean

# WAN benchmark against rsync, rclone, lftp, OpenSSH, Airflow's SFTPHook and sshfs (docs/benchmarks.md);
# BENCH_ARGS passes runner options, e.g. BENCH_ARGS='--contenders wide' for the 2026-11-25 matrix's selection.
bench:
	@bash benchmarks/bench.sh full $(BENCH_ARGS)

bench-quick:
	@bash benchmarks/bench.sh quick

# Attribute-based access over wan50, paper 004 Table 4 analog (docs/query.md); QUERY_ARGS=--quick for a smoke run.
bench-query: venv
	@bash scripts/setup-test-deps.sh
	@bash scripts/install-wan-deps.sh
	@$(PY) -c "import matplotlib" 2>/dev/null || (command -v uv >/dev/null 2>&1 && uv pip install -q -p $(PY) matplotlib) \
		|| $(PY) -m pip install -q matplotlib
	@$(PY) -m benchmarks.query_bench $(QUERY_ARGS)

# `auto` on drawn links and datasets nobody tuned on, against a fixed grid (its oracle) and rsync
# (docs/benchmarks.md). Writes benchmarks/results/generalize.{json,md}. GENERALIZE_ARGS=--dry-run for the plan,
# GENERALIZE_ARGS='--pairs 1 --only 0 --grid quick --seconds 2 --out /tmp/gen-smoke' for a smoke run.
bench-generalize: venv
	@bash scripts/setup-test-deps.sh
	@bash scripts/install-wan-deps.sh
	@command -v rsync >/dev/null 2>&1 || apt-get install -y -qq --no-install-recommends rsync >/dev/null
	@$(PY) -m benchmarks.generalize $(GENERALIZE_ARGS)

# Each paper's headline effect measured on the emulated links; writes docs/papers.md and its charts
# (docs/papers/). Resumable: each call runs for at most PAPERS_BUDGET_MIN minutes (default 45) and the next
# continues; a new commit starts afresh. PAPERS_ARGS='--effects e6_integrity' for one effect, '--quick' for a smoke run.
.PHONY: papers
papers: venv
	@bash scripts/install-bench-deps.sh
	@$(PY) -m benchmarks.papers --budget-min $(or $(PAPERS_BUDGET_MIN),45) $(PAPERS_ARGS)

# Loopback engine benchmark (prints MiB/s; not a test).
bench-loopback: venv
	@bash scripts/setup-test-deps.sh
	@$(PY) benchmarks/loopback.py

# Load (issue #11): 100,000 x 1 KiB in one transfer (peak RSS, files/s), then 20 transfers at once on one
# SQLite and one PostgreSQL store; tens of minutes. Writes benchmarks/results/load.md. LOAD_ARGS=--help.
.PHONY: bench-load
bench-load: venv
	@bash scripts/setup-test-deps.sh
	@$(PY) -m benchmarks.load $(LOAD_ARGS)

# A real Airflow deployment (CeleryExecutor, Redis, PostgreSQL, 2 workers) runs the
# replication DAG; a few minutes, so not part of `make test` (tests/system/last-result.md).
system-test: venv
	@bash scripts/system-test.sh

# Chaos suite (docs/reliability.md): 210 transfers over wan50, one fault each at a random moment,
# invariants after each; ~1 h on a loaded 2-core box. CHAOS_ARGS='--faults 50 --seed 7' for less.
chaos: venv
	@bash scripts/setup-test-deps.sh
	@bash scripts/install-wan-deps.sh
	@$(PY) -m benchmarks.chaos $(CHAOS_ARGS)

# Interoperability (benchmarks/interop.py): the CLI against rclone serve sftp, asyncssh, ProFTPD mod_sftp,
# dropbear, OpenSSH ForceCommand+chroot and plain OpenSSH; uploads and downloads in five modes, clean and
# after kill -9. Writes benchmarks/results/interop.md. INTEROP_ARGS='--servers rclone --quick' for less.
interop: venv
	@bash scripts/setup-test-deps.sh
	@bash scripts/install-interop-deps.sh
	@$(PY) -m benchmarks.interop $(INTEROP_ARGS)

lock:
	uv pip compile -q pyproject.toml --extra airflow --extra test --extra celery --extra lineage -p 3.11 -o requirements.lock

clean:
	rm -rf .venv .demo
