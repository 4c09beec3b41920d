"""Benchmarks and the emulated WAN testbed (not part of the installed package)."""
