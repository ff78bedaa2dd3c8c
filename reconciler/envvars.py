"""A Job's `env` in the two forms a manifest may write it, and the one mapping it means.

The seeds write a mapping (`env: {LOG_LEVEL: debug}`); users of the platform's
`kubectl apply` write the Kubernetes list (`env: [{name: LOG_LEVEL, value: debug}]`).
Validation accepts both (schemas/defs.schema.json, `env`); every backend and controller
turns either into `{name: value}` with `env_mapping` and never reads `spec.env` itself.
"""

from __future__ import annotations

from typing import Any

RESERVED_PREFIX = "NODUS_"
ALLOWED_PREFIX = "NODUS_PARAM_"  # Sweep parameters, which a user may also set
ENTRY_KEYS = ("name", "value")
# Why a list entry may hold nothing but a name and a value, for every problem that says so.
ONLY_NAME_AND_VALUE = ("an env entry has only name and value (a string); valueFrom "
                       "(Secrets, ConfigMaps, field references) is not supported")


class EnvError(ValueError):
    """An `env` that validation refuses; the message starts with the field (`env[1].name`)."""


def reserved(name: str) -> bool:
    """A name the platform keeps for its own variables: NODUS_ but not NODUS_PARAM_."""
    return name.startswith(RESERVED_PREFIX) and not name.startswith(ALLOWED_PREFIX)


def env_mapping(env: Any) -> dict[str, str]:
    """`spec.env` in either form as a new `{name: value}`, in the order written.

    A list entry without a value has the empty value, as on Kubernetes. Raises EnvError for
    what validation refuses (a name set twice, valueFrom, values that are not strings);
    reserved names are left for the caller (validation refuses them, a backend drops them)."""
    if env is None:
        return {}
    if isinstance(env, dict):
        for name, value in env.items():
            if not isinstance(value, str):
                raise EnvError(f"env.{name}: expected a string (quote it)")
        return {str(name): value for name, value in env.items()}
    if not isinstance(env, list):
        raise EnvError("env: expected a mapping of NAME: value or a list of {name, value}")
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    for i, entry in enumerate(env):
        if not isinstance(entry, dict):
            raise EnvError(f"env[{i}]: expected a mapping with name and value")
        extra = [k for k in entry if k not in ENTRY_KEYS]
        if extra:
            raise EnvError(f"env[{i}].{extra[0]}: {ONLY_NAME_AND_VALUE}")
        name, value = entry.get("name"), entry.get("value", "")
        if name is None:
            raise EnvError(f"env[{i}].name: required")
        if not isinstance(name, str):
            raise EnvError(f"env[{i}].name: expected a string")
        if not isinstance(value, str):
            raise EnvError(f"env[{i}].value: expected a string (quote it)")
        if name in first:
            raise EnvError(f"env[{i}].name: {twice(name, first[name], i)}")
        first[name] = i
        out[name] = value
    return out


def twice(name: str, first: int, again: int) -> str:
    return f"{name!r} is set twice (env[{first}] and env[{again}])"
