"""Parsing the platform's scalar formats: durations, quantities, dollar amounts, times."""

from __future__ import annotations

import math
import re
from datetime import datetime
from decimal import Decimal, InvalidOperation

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_SECONDS = re.compile(_NUMBER)
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")
_DURATION_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_FORMS = "seconds such as 90, or 30s, 5m, 2h, 1h30m, 500ms, 1d"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_SUFFIX = {
    None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}
GIB = 2**30
TIB = 2**40


class DurationError(ValueError):
    """A value that is not a duration; the message names the setting and the value."""


def parse_duration(value: object) -> float | None:
    """Seconds in a duration, or None when `value` is not one. The one grammar:

        duration := number | (number unit)+      surrounding spaces ignored
        number   := digits ["." digits] | "." digits
        unit     := ms | s | m | h | d           (lowercase)

    so `90`, `90s`, `2m`, `1h30m`, `1.5h`, `500ms`, `1d`; parts add up, in any order. An
    int or float (a YAML number) is that many seconds. Not a duration: signs, exponents,
    inf or nan, spaces inside, other units, booleans, anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return float(text)
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def duration(value: object, setting: str = "") -> float:
    """`parse_duration(value)`, or a `DurationError` naming `setting` and the value."""
    seconds = parse_duration(value)
    if seconds is None:
        where = f"{setting}: " if setting else ""
        raise DurationError(f"{where}{value!r} is not a duration ({DURATION_FORMS})")
    return seconds


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
