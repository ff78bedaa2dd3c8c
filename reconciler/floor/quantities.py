"""Parsing the platform's scalar formats: durations, quantities, dollar amounts, times."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

_DURATION = re.compile(r"^(?=\d)(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_SUFFIX = {
    None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}
GIB = 2**30
TIB = 2**40


def parse_duration(text: str) -> int | None:
    """Seconds in `90s`, `10m`, `2h`, `1h30m`; None when the text is not a duration."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if not m:
        return None
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def parse_quantity(text: str | int | float) -> int | None:
    """Bytes (or plain units) in `24Gi`, `512Mi`, `4G`, `1000`; None when malformed."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return int(text)
    m = _QUANTITY.match(text) if isinstance(text, str) else None
    if not m:
        return None
    return int(Decimal(m.group(1)) * _SUFFIX[m.group(2)])


def parse_cpu(value: str | int | float) -> float | None:
    """Cores in `"2"`, `"0.5"` or `"500m"`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value[:-1]) / 1000 if value.endswith("m") else float(value)
        except ValueError:
            return None
    return None


def parse_usd(text: str) -> Decimal | None:
    """A decimal dollar amount written as a string (`"0.25"`); None when malformed."""
    if not isinstance(text, str):
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time with an explicit offset (`2026-12-01T18:00:00Z`)."""
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else None
