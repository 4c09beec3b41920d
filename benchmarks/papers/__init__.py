"""`make papers`: each headline effect of the five papers measured on the emulated links (docs/papers.md)."""

# Page order; each is a module of this package (benchmarks/papers/common.py says what one holds).
EFFECTS = (
    "e1_pp_rtt",
    "e2_pp_eq4",
    "e3_p_cc",
    "e4_pcp_mc_globus",
    "e5_adaptive_cc",
    "e6_integrity",
    "e7_stork",
    "e8_loss",
)
