"""A package's names imported on first use (PEP 562), for `interlock` and `interlock.testing`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose `namespace` (its globals) gets
    each name of `modules` (name -> the module that defines it) on first use."""

    def __getattr__(name: str) -> object:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        # Every lazy name of that module at once, so the next lookup is a plain global.
        namespace.update({n: getattr(loaded, n) for n, m in modules.items() if m == module})
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted({*namespace, *modules})

    return __getattr__, __dir__
