"""Algorithm names -> classes, and `get_algorithm(name, **options)`."""

from __future__ import annotations

import inspect
from typing import Any

from .adaptive_cc import AdaptiveCC
from .auto import Auto
from .base import Algorithm, ProbeLimits
from .first_contact import FirstContact
from .fixed import Fixed
from .globus import Globus
from .multichunk import MultiChunk
from .pcp import PCP

ALGORITHMS: dict[str, type[Algorithm]] = {
    "fixed": Fixed,
    "globus": Globus,
    "pcp": PCP,
    "mc": MultiChunk,
    "adaptive-cc": AdaptiveCC,
    "first-contact": FirstContact,
    "auto": Auto,
}


def get_algorithm(name: str, **options: Any) -> Algorithm:
    """An algorithm instance; unknown names and options raise ValueError naming the valid ones."""
    cls = ALGORITHMS.get(name)
    if cls is None:
        raise ValueError(f"unknown tuning algorithm {name!r}; choose one of: {', '.join(ALGORITHMS)}")
    params = inspect.signature(cls.__init__).parameters.values()
    limits = list(ProbeLimits.__annotations__) if any(p.kind is p.VAR_KEYWORD for p in params) else []
    valid = limits + [p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"algorithm {name!r} has no option {', '.join(unknown)}; its options are: {', '.join(valid) or 'none'}"
        )
    return cls(**options)
