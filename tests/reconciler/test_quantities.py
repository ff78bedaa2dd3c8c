"""The one duration grammar (floor.quantities), and the places that read durations with it:
binding intervals, the local backend's spec fields and the CLI's --timeout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nodus_gitops.cli import build_parser
from nodus_gitops.config import _coerce
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.quantities import DurationError, duration, parse_duration
from nodus_gitops.providers.local.spec import SpecError
from nodus_gitops.providers.local.spec import parse_duration as spec_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("15", 15), ("2.5", 2.5), ("0", 0),  # plain seconds
    ("30s", 30), ("90s", 90), ("5m", 300), ("10m", 600), ("15m", 900), ("2h", 7200),
    ("1h30m", 5400), ("1h30m15s", 5415), ("1h0m0s", 3600), ("1.5h", 5400),
    ("500ms", 0.5), ("1d", 86400), ("1s500ms", 1.5), ("30s1m", 90),  # any order, Go-like
    (" 5m ", 300),  # surrounding spaces
    (90, 90), (2.5, 2.5), (0, 0),  # YAML numbers
])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)
    assert duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", [
    "", " ", "10x", "1x", "m1", "1 h", "1h 30m", "1h30", "h", "5M", "1H", "-5", "-5s", "+5",
    "1e3", "inf", "nan", "1_000", "s", ".", True, False, None, [], -1, float("inf"),
    float("nan"),
])
def test_what_is_not_a_duration(bad):
    assert parse_duration(bad) is None
    with pytest.raises(DurationError) as raised:
        duration(bad, "spec.timeout")
    assert str(raised.value).startswith(f"spec.timeout: {bad!r} is not a duration (")
    assert "30s, 5m, 2h" in str(raised.value)


def test_the_error_without_a_setting_names_only_the_value():
    with pytest.raises(DurationError, match=r"^'2x' is not a duration \(seconds such as 90"):
        duration("2x")


def _formatted(seconds: int, show_zeros: bool) -> str:
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((h, "h"), (m, "m"), (s, "s")) if n or show_zeros]
    return "".join(parts) or "0s"


@given(st.integers(min_value=0, max_value=10**7), st.booleans())
def test_formatting_seconds_as_hms_parses_back(seconds, show_zeros):
    assert parse_duration(_formatted(seconds, show_zeros)) == seconds


@given(st.integers(min_value=0, max_value=10**7))
def test_plain_seconds_parse_back(seconds):
    assert parse_duration(str(seconds)) == seconds
    assert parse_duration(seconds) == seconds


@given(st.lists(st.tuples(st.integers(0, 10**4), st.sampled_from(["ms", "s", "m", "h", "d"])),
                min_size=1, max_size=5))
def test_parts_add_up_in_any_order(parts):
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_duration(text) == pytest.approx(sum(n * unit[u] for n, u in parts))


# -- the readers --------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [("30s", 30), ("5m", 300), ("45", 45),
                                                (60, 60), ("1.5", 1.5)])
def test_a_binding_interval_is_a_duration(value, seconds):
    assert _coerce("interval", value, "repos[0].interval") == seconds


@pytest.mark.parametrize("value", ["fast", "5 m", "-30", True])
def test_a_bad_interval_names_the_setting_and_the_value(value):
    with pytest.raises(ConfigError, match=rf"^repos\[0\]\.interval: {value!r} is not a dur"):
        _coerce("interval", value, "repos[0].interval")


def test_a_too_short_interval_is_still_refused():
    with pytest.raises(ConfigError, match="at least"):
        _coerce("interval", "0s", "repos[0].interval")


def test_the_local_backend_reads_the_same_grammar():
    assert spec_duration("1h30m", "timeout") == 5400
    assert spec_duration("500ms") == 0.5
    with pytest.raises(SpecError, match=r"^timeout: '1 h' is not a duration"):
        spec_duration("1 h", "timeout")


@pytest.mark.parametrize(("flag", "seconds"), [("90", 90), ("90s", 90), ("2m", 120)])
def test_the_cli_timeout_is_a_duration(flag, seconds):
    args = build_parser().parse_args(["reconcile", "--timeout", flag])
    assert args.timeout == seconds


def test_a_bad_cli_timeout_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["reconcile", "--timeout", "2x"])
    assert exited.value.code == 2
    assert "argument --timeout: '2x' is not a duration" in capsys.readouterr().err


@given(st.one_of(st.from_regex(r"\A ?[0-9]{1,4}(\.[0-9]{1,2})?(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|m)? ?\Z"),
                 st.integers(min_value=0, max_value=2**50), st.text(max_size=6)))
def test_the_local_backend_reads_quantities_with_the_floors_one_grammar(value) -> None:
    """Memory in a manifest or a backend setting and CPU: one grammar, the schemas'."""
    from nodus_gitops.floor.quantities import parse_cpu, parse_quantity
    from nodus_gitops.providers.local.spec import SpecError, parse_memory
    from nodus_gitops.providers.local.spec import parse_cpu as local_cpu

    for local, floor in ((parse_memory, parse_quantity), (local_cpu, parse_cpu)):
        expected = floor(value.strip() if isinstance(value, str) else value)
        if expected is None:
            with pytest.raises(SpecError):
                local(value)
        else:
            assert local(value) == expected
