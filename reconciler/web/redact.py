"""Masking for the dashboard: environment values (and Sweep parameters) whose names look
secret are replaced before a manifest or a status is shown or served."""

from __future__ import annotations

import re
from typing import Any

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW(OR)?D|KEY|CREDENTIAL", re.IGNORECASE)
MASK = "********"
_ENV_KEYS = frozenset({"env", "params"})


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask(value: Any, _under_env: bool = False) -> Any:
    """A copy of `value` with secret-looking entries of every `env`/`params` masked."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if _under_env and isinstance(k, str) and looks_secret(k) and not isinstance(
                    v, dict | list):
                out[k] = MASK
            else:
                out[k] = mask(v, k in _ENV_KEYS)
        if _under_env is False and "name" in value and "value" in value and looks_secret(
                str(value["name"])):
            out["value"] = MASK
        return out
    if isinstance(value, list):
        return [mask(v, False) for v in value]
    return value
