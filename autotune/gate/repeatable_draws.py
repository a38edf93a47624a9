"""The same seed draws the same problems in every process, and on any machine with the same versions.

Hypothesis's default provider sometimes draws, instead of a random value, a constant it found in the source of
an imported "local" module (anything outside the standard library and the site-packages directories). Which
modules count depends on how packages were installed (editable, `pip install --target DIR`) and on what the
process has imported so far. So one seed drew other problems in a search's main process, which compiles ahead
what verify will draw, than in its evaluation worker, which imports less; and a failure's seed did not draw
the same problems on another machine. The problem strategies draw their edge cases themselves, so verify turns
the local constants off while it draws; Hypothesis's own constants (0, -1, the bounds, ...) stay.

This reaches into `hypothesis.internal` (no public setting exists). Where that Hypothesis has no local constants
or names them otherwise, nothing is changed, and `local_constants_controlled()` says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from hypothesis.internal.conjecture import providers as _providers
except ImportError:  # pragma: no cover - an old Hypothesis: no local constants either
    _providers = None

_SWAPPED = ("_get_local_constants", "CONSTANTS_CACHE", "Constants")


def local_constants_controlled() -> bool:
    """Whether this Hypothesis draws local constants in a way `without_local_constants` turns off."""
    return _providers is not None and all(hasattr(_providers, name) for name in _SWAPPED)


# Hypothesis caches, per kind of draw, the constants it may choose from: the pools drawn from under the swap are
# kept apart from its own (pools holding local constants made outside the block, or without them seen after it).
_OWN_CACHE: Any = type(_providers.CONSTANTS_CACHE)(1024) if local_constants_controlled() else None


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Within the block, Hypothesis draws no constants from the source of local modules."""
    if not local_constants_controlled():
        yield
        return
    none = _providers.Constants()
    saved = _providers._get_local_constants, _providers.CONSTANTS_CACHE
    _providers._get_local_constants, _providers.CONSTANTS_CACHE = (lambda: none), _OWN_CACHE
    try:
        yield
    finally:
        _providers._get_local_constants, _providers.CONSTANTS_CACHE = saved
