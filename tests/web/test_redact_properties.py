"""Masking's promises over arbitrary inputs (Hypothesis): a configured secret embedded
anywhere in a structure or a text never shows; the shape (keys, list lengths, line count)
is kept; and values that neither are nor look like secrets are shown unchanged."""

from __future__ import annotations

import re
import string
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.web.redact import MASK, Masker, looks_secret, mask, mask_text

# A secret: printable text of at least 4 non-blank characters, none of them the mask's `*`.
secret_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="*"),
                      min_size=4, max_size=24).filter(lambda s: len(s.strip()) >= 4)
noise = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
# Keys as manifests have them; `env` and `params` among them, so sections occur.
keys = st.one_of(st.sampled_from(["env", "params", "name", "value", "spec", "command",
                                  "API_KEY", "LOG_LEVEL", "message"]),
                 st.text(string.ascii_letters + "_-.", min_size=1, max_size=12))


@st.composite
def embedded(draw: st.DrawFn, secret: str) -> str:
    """A string with `secret` somewhere in it (or not), between arbitrary text."""
    parts = [draw(noise)]
    for _ in range(draw(st.integers(0, 2))):
        parts += [secret, draw(noise)]
    return "".join(parts)


def structures(leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4),
        st.lists(st.fixed_dictionaries({"name": keys, "value": inner}), max_size=3)),
        max_leaves=12)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [str(value)]


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", len(value), sorted((_shape(v) for v in value.values()), key=repr))
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    return "leaf"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(secret_text, min_size=1, max_size=3))
def test_a_configured_secret_never_shows_in_a_structure(data: st.DataObject,
                                                        secrets: list[str]) -> None:
    leaf = st.one_of(*(embedded(s) for s in secrets), st.integers(), st.none(), st.booleans())
    value = data.draw(structures(leaf))
    keyed = data.draw(st.dictionaries(st.one_of(*(embedded(s) for s in secrets)),
                                      structures(leaf), max_size=3))
    for original in (value, keyed):
        shown = mask(original, secrets)
        for text in _strings(shown):
            for secret in secrets:
                assert secret.strip() not in text
        assert repr(_shape(shown)) == repr(_shape(original))


@settings(max_examples=200)
@given(st.data(), st.lists(secret_text, min_size=1, max_size=3))
def test_a_configured_secret_never_shows_in_a_text(data: st.DataObject,
                                                   secrets: list[str]) -> None:
    text = data.draw(st.one_of(*(embedded(s) for s in secrets)))
    shown = Masker(secrets).text(text)
    masked_file = mask_text(text, secrets)
    for secret in secrets:
        assert secret.strip() not in shown
        assert secret.strip() not in masked_file
    assert len(masked_file.splitlines()) == len(text.splitlines())


yaml_line = st.one_of(
    st.builds(lambda ind, k, v: f"{' ' * ind}{k}: {v}", st.integers(0, 8), keys, noise),
    st.builds(lambda ind, v: f"{' ' * ind}- {v}", st.integers(0, 8), noise),
    st.builds(lambda ind, k: f"{' ' * ind}{k}:", st.integers(0, 8), keys), noise)


@settings(max_examples=200)
@given(st.lists(yaml_line, max_size=12), st.lists(secret_text, max_size=2),
       st.sampled_from(["\n", "\r\n"]))
def test_a_files_lines_keep_their_numbers(lines: list[str], secrets: list[str],
                                          newline: str) -> None:
    text = newline.join(lines)
    shown = mask_text(text, secrets)
    assert shown.count("\n") == text.count("\n")
    assert len(shown.splitlines()) == len(text.splitlines())
    assert mask_text(shown, secrets) == shown  # masked once is masked for good


plain_name = st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: not looks_secret(n))
# Values that are not secrets and do not look like one: words, numbers, paths, images.
plain_value = st.one_of(
    st.from_regex(r"[a-z]{1,8}( [a-z]{1,8}){0,3}", fullmatch=True),
    st.integers(0, 10**9).map(str),
    st.from_regex(r"(/[a-z0-9_.-]{1,10}){1,4}", fullmatch=True),
    st.from_regex(r"[a-z0-9]{1,10}(/[a-z0-9]{1,10})?:[0-9][0-9.]{0,5}", fullmatch=True))


@settings(max_examples=200)
@given(st.dictionaries(plain_name, plain_value, max_size=6),
       st.lists(plain_value, max_size=6), st.lists(secret_text, max_size=2))
def test_values_that_are_not_secret_are_shown_unchanged(env: dict[str, str],
                                                        args: list[str],
                                                        secrets: list[str]) -> None:
    secrets = [s for s in secrets
               if not any(s.strip() in v for v in [*env, *env.values(), *args])]
    manifest = {"spec": {"env": env, "args": args,
                         "template": {"env": [{"name": k, "value": v} for k, v in env.items()]}}}
    assert mask(manifest, secrets) == manifest
    text = "spec:\n  env:\n" + "".join(f"    {k}: {v}\n" for k, v in env.items()) + \
        "  args:\n" + "".join(f"    - {a}\n" for a in args)
    assert mask_text(text, secrets) == text


@given(st.dictionaries(st.from_regex(r"[A-Za-z_]{0,6}(TOKEN|SECRET|PASSWORD|KEY)[A-Z_]{0,6}",
                                     fullmatch=True), plain_value, min_size=1, max_size=5))
def test_a_secret_name_hides_its_value_in_both_forms(env: dict[str, str]) -> None:
    shown = mask({"env": env, "list": {"env": [{"name": k, "value": v}
                                               for k, v in env.items()]}})
    assert shown["env"] == dict.fromkeys(env, MASK)
    assert all(e["value"] == MASK for e in shown["list"]["env"])
    text = "env:\n" + "".join(f"  {k}: {v}\n" for k, v in env.items())
    assert re.findall(r": (.*)", mask_text(text)) == [MASK] * len(env)
