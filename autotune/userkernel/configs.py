"""A tuned launcher's configs: a `triton.Config` list as `triton.autotune` takes it, made a search space (each
kwarg, `num_warps` and `num_stages` a parameter; only the listed combinations valid), or a `SearchSpace`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import triton

from autotune.space import LAUNCH_OPTIONS, Config, InvalidConfig, Param, SearchSpace

PLAIN = (int, float, str, bool)
"""Values a config may hold: what Optuna draws and a database row stores as JSON."""
_TRITON_DEFAULTS = {"num_ctas": 1, "maxnreg": None}


def as_dict(config: triton.Config) -> Config:
    """A triton.Config as one flat dict: its kwargs, num_warps and num_stages (num_ctas and maxnreg where set)."""
    flat = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    for option, default in _TRITON_DEFAULTS.items():
        if getattr(config, option, default) != default:
            flat[option] = getattr(config, option)
    return flat


def space_of_configs(kernel: str, configs: Sequence[triton.Config]) -> SearchSpace:
    """The search space of a triton.Config list; the first config is the default (the runtime's fallback)."""
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Sequence) or not configs:
        raise TypeError(f"{kernel}: configs= must be a non-empty list of triton.Config")
    flats = []
    for i, c in enumerate(configs):
        if not isinstance(c, triton.Config):
            raise TypeError(f"{kernel}: configs[{i}] is a {type(c).__name__}, not a triton.Config")
        if getattr(c, "pre_hook", None) is not None:
            raise ValueError(
                f"{kernel}: configs[{i}] has a pre_hook; a tuned launcher prepares its own buffers "
                "(a pre_hook cannot be stored in a database)"
            )
        flat = as_dict(c)
        for name, value in flat.items():
            if not isinstance(value, PLAIN):
                raise TypeError(f"{kernel}: configs[{i}] has {name}={value!r}; expected int, float, str or bool")
        flats.append(flat)
    names = list(dict.fromkeys(n for f in flats for n in f))
    for i, f in enumerate(flats):
        missing = [n for n in names if n not in f]
        if missing:
            raise ValueError(
                f"{kernel}: configs[{i}] lacks {missing}, which other configs set: every config "
                "must set the same kwargs"
            )
    params = tuple(Param(n, tuple(dict.fromkeys(f[n] for f in flats))) for n in names)
    listed = {_key(f) for f in flats}
    product = len(listed) == _count(params)

    def listed_only(config: Config, _problem: Mapping[str, Any]) -> str | None:
        return None if _key(config) in listed else "not one of the listed triton.Configs"

    return SearchSpace(params=params, default=flats[0], constraints=() if product else (listed_only,))


def _key(config: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, type(v).__name__, v) for k, v in config.items()))


def _count(params: Sequence[Param]) -> int:
    n = 1
    for p in params:
        n *= len(p.values)
    return n


def given_config(kernel: str, space: SearchSpace, config: Any) -> Config:
    """A call's explicit `config=`: a dict or triton.Config, keys left out taken from the default; used as given
    (not required to be one of the listed configs), but every key must be the space's."""
    if isinstance(config, triton.Config):
        config = as_dict(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"{kernel}: config= must be a dict or a triton.Config, got {type(config).__name__}")
    unknown = sorted(set(config) - set(space.names))
    if unknown:
        raise InvalidConfig(f"{kernel}: config= has unknown key(s) {unknown}; expected {list(space.names)}")
    return {**space.default, **config}


def triton_parts(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(kwargs, launch options) of a flat config, as `triton.Config(kwargs, **options)` takes them."""
    kwargs = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    return kwargs, {k: v for k, v in config.items() if k in LAUNCH_OPTIONS}
