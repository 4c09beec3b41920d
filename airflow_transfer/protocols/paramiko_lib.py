"""paramiko, imported without loading invoke until something uses it.

paramiko's config module imports invoke for one feature of ssh_config files, `Match exec`
(it runs the command with invoke.run); loading invoke costs every copy about 0.03 s at
start (it brings a YAML parser and unittest.mock). Before paramiko's first import, a
stand-in module is registered under the name `invoke`: `import invoke` finds it, and the
first attribute read from it imports the real package and answers from that, so
`Match exec` works as before. (importlib.util.LazyLoader cannot do this on Python 3.11:
the import statement itself reads the module's `__spec__`, which loads it.) Every use of
paramiko in this package imports it from here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.Lock()


class _Deferred(types.ModuleType):
    """Stands for a module until an attribute it does not hold is read."""

    def __getattr__(self, attr: str) -> Any:
        with _lock:
            real = self.__dict__.get("_real")
            if real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                real = importlib.import_module(self.__name__)
                self.__dict__["_real"] = real
        return getattr(real, attr)


def defer(name: str) -> None:
    """Register a stand-in for module `name` unless it is loaded or not installed."""
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return  # not installed: paramiko says what is missing when `Match exec` needs it
    sys.modules[name] = _Deferred(name)


defer("invoke")

import paramiko  # noqa: E402 - after the stand-in above, which is what this module is for

__all__ = ["paramiko"]
