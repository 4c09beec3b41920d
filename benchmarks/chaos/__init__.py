"""Chaos suite (issue #11): transfers over the emulated WAN with faults injected at
random moments, and the invariants checked after each. `make chaos`; CI subset in
tests/test_chaos.py; what is guaranteed and how faults count as reported:
docs/reliability.md."""
