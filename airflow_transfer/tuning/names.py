"""The tuning algorithms' names, in the registry's order, without importing them.

The command line offers these as choices before it opens any connection; the classes
(tuning/registry.py) bring pyarrow and NumPy, which load while the connections open.
tests/test_tuning_algorithms.py checks that the two lists agree.
"""

from __future__ import annotations

ALGORITHM_NAMES: tuple[str, ...] = ("fixed", "globus", "pcp", "mc", "adaptive-cc", "first-contact", "auto")
