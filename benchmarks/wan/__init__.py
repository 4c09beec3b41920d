"""An emulated wide-area link between two network namespaces.

The API lives in `benchmarks.wan.link` (imported from there, so that
`python -m benchmarks.wan.link` runs without a double import); see
docs/testbed.md.
"""
