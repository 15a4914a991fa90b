"""Every measurement family, collected from the modules of yardstick/tasks/ that declare a `FAMILY`:
adding a family is writing its module (plus its SQL models and report section)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from yardstick import tasks
from yardstick.tasks.base import Family


@cache
def families() -> dict[str, Family]:
    """Every declared family by name, in name order; a name declared twice is refused."""
    found: dict[str, Family] = {}
    for module in pkgutil.iter_modules(tasks.__path__):
        family = getattr(importlib.import_module(f"{tasks.__name__}.{module.name}"), "FAMILY", None)
        if family is None:
            continue
        if not isinstance(family, Family):
            raise TypeError(f"yardstick/tasks/{module.name}.py: FAMILY is not a Family")
        if family.name in found:
            raise RuntimeError(
                f"yardstick/tasks/{module.name}.py: family {family.name!r} declared twice"
            )
        found[family.name] = family
    return dict(sorted(found.items()))
