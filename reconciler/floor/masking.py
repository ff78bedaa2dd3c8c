"""Masking: what a manifest, a status, a plan or a message would reveal of a secret,
replaced by MASK before anyone reads it (the dashboard and the API, `web.redact`; the
commit checks and the plan comment, `checks`).

Three rules, applied everywhere a value is shown:

- An environment value (under `env`, as a mapping or the `{name, value}` list, and a
  Sweep's `params`) is hidden whole when its name looks secret (`looks_secret`) or its
  value does (`looks_secret_value`: a secret shape anywhere in it, an Authorization
  header's value, or one long high-entropy token).
- In any other string (a Job's own `command` and `args` included) only the parts that are
  secrets are hidden: what the published rule set finds (gitleaks' rules and the
  project's own, `redaction.secret_spans`: vendor tokens, cloud keys, JWTs, private
  keys, a URL's or a connection string's password, a webhook URL's path, `Bearer ...`),
  a string that is one long high-entropy token, and a secret the config names.
  Every other word is shown as written.
- Keys, list lengths and line counts are kept, so that a reader still sees the shape.

A configured secret shorter than MIN_SECRET characters is not masked (hiding every "ab"
would hide the page, not the secret), nor can a secret made of the mask's own `*` be.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from nodus_gitops.floor.redaction import entropy, merge_spans, secret_spans

MASK = "********"
MIN_SECRET = 4
_ENV_KEYS = frozenset({"env", "params"})

# Names of secrets: words (token, secret, password, key, credential, ...) anywhere, and
# short ones as whole parts of the name (`PW`, `DB_PW`, `MYSQL_PWD` but not `PWD`, the
# shell's directory; `ADMIN_PIN` but not `PIN_MEMORY`; `PASS*` but not `BYPASS`).
SECRET_NAME = re.compile(
    r"token|secret|passw(or)?d|passphrase|(^|[_.-])pass|(^|[_.-])pw($|[_.-])"
    r"|[_.-]pwd($|[_.-])|^pwd[_.-]|(^|[_.-])pin(code)?$|key|credential|(^|[_.-])creds?($|[_.-])"
    r"|auth|cookie|session|private|jwt|salt|signature|hook", re.IGNORECASE)

# A whole environment value that is an Authorization header's value, however short.
_AUTH_HEADER = re.compile(r"^\s*(?:bearer|basic|token)\s+\S", re.IGNORECASE)

# A long high-entropy string: at least HIGH_ENTROPY_LENGTH characters of a token alphabet,
# with upper- and lower-case letters and digits, and at least HIGH_ENTROPY_BITS of Shannon
# entropy per character. Hex (a commit, a digest) has neither case mix nor over 4 bits.
HIGH_ENTROPY_LENGTH = 32
HIGH_ENTROPY_BITS = 4.3
_TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9+/=_-]+")
_LINE_BREAK = re.compile(r"(\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])")


def looks_secret(name: str) -> bool:
    """Whether an environment variable or parameter of this name holds a secret."""
    return bool(SECRET_NAME.search(name))


def high_entropy(value: str) -> bool:
    """Whether `value` is one long token of high entropy (see HIGH_ENTROPY_LENGTH)."""
    text = value.strip()
    if len(text) < HIGH_ENTROPY_LENGTH or not _TOKEN_ALPHABET.fullmatch(text):
        return False
    if not (any(c.isupper() for c in text) and any(c.islower() for c in text)
            and any(c.isdigit() for c in text)):
        return False
    return entropy(text) >= HIGH_ENTROPY_BITS


def _hidden(piece: str) -> str:
    """One line's piece of a hidden span: MASK, after the indentation it starts with."""
    if not piece.strip():  # a line break, or blanks: nothing of a secret
        return piece
    return piece[:len(piece) - len(piece.lstrip())] + MASK


class Masker:
    """Masking with one set of configured secrets (see `configured_secrets`)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        usable = {s.strip() for s in secrets if isinstance(s, str)}
        # Longest first: a secret inside a longer one is hidden with it.
        self.secrets = sorted((s for s in usable if len(s) >= MIN_SECRET), key=len,
                              reverse=True)
        self._shown: dict[str, str] = {}  # short strings (keys, phases) repeat: mask once

    # -- strings -----------------------------------------------------------------------

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The parts of `text` to hide: secret shapes, a whole high-entropy token, and
        configured secrets, merged."""
        found = list(secret_spans(text))
        if high_entropy(text):
            found.append((len(text) - len(text.lstrip()), len(text.rstrip())))
        for secret in self.secrets:
            at = text.find(secret)
            while at >= 0:
                found.append((at, at + len(secret)))
                at = text.find(secret, at + 1)
        return merge_spans(found)

    def text(self, text: str) -> str:
        """`text` with its secret parts hidden; line breaks inside a hidden part are kept,
        so a script keeps its lines."""
        if len(text) <= 64:
            shown = self._shown.get(text)
            if shown is None:
                shown = self._shown[text] = self._text(text)
            return shown
        return self._text(text)

    def _text(self, text: str) -> str:
        out, last = [], 0
        for start, end in self.spans(text):
            out.append(text[last:start])
            out += [_hidden(piece) for piece in _LINE_BREAK.split(text[start:end])]
            last = end
        out.append(text[last:])
        return "".join(out)

    def looks_secret_value(self, value: str) -> bool:
        """Whether an environment value is a secret by its looks, whatever its name."""
        return bool(_AUTH_HEADER.match(value) or self.spans(value) or high_entropy(value))

    # -- structures --------------------------------------------------------------------

    def value(self, value: Any) -> Any:
        """A copy of `value` (a manifest, a status) with every secret hidden."""
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                shown = v if not isinstance(k, str) else (
                    self._env(v) if k in _ENV_KEYS else self.value(v))
                out[self._key(k, out)] = shown
            if isinstance(value.get("name"), str) and "value" in value and looks_secret(
                    value["name"]):  # a {name, value} pair wherever it is
                out["value"] = self._entry(value["name"], value["value"])
            return out
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int | float):  # bools too: a secret may read "True"
            return MASK if self.spans(str(value)) else value
        return value

    def _hide_all(self, value: Any) -> Any:
        """Every value inside `value` hidden, its shape kept."""
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                out[self._key(k, out)] = self._hide_all(v)
            return out
        if isinstance(value, list):
            return [self._hide_all(v) for v in value]
        return value if value is None else MASK

    def _key(self, key: Any, taken: Mapping[Any, Any]) -> Any:
        """A key as shown: hidden when it holds a secret, kept apart from its neighbours."""
        if not isinstance(key, str):
            return key
        shown, n = self.text(key), 1
        while shown in taken:
            n += 1
            shown = f"{self.text(key)} ({n})"
        return shown

    def _env(self, env: Any) -> Any:
        """An `env` or `params` section: a mapping of names, or the `{name, value}` list."""
        if isinstance(env, dict):
            out: dict[Any, Any] = {}
            for k, v in env.items():
                out[self._key(k, out)] = self._entry(str(k), v)
            return out
        if isinstance(env, list):
            return [self._list_entry(item) for item in env]
        return self.value(env)

    def _list_entry(self, item: Any) -> Any:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)):
            return self.value(item)
        out = self.value({k: v for k, v in item.items() if k != "value"})
        if "value" in item:
            out["value"] = self._entry(item["name"], item["value"])
        return out

    def _entry(self, name: str, value: Any) -> Any:
        """One environment value (a parameter's may be a list of values)."""
        if looks_secret(name):
            return self._hide_all(value)
        if isinstance(value, list):
            return [self._entry(name, v) for v in value]
        if isinstance(value, dict):
            return self.value(value)
        if isinstance(value, str):
            return MASK if self.looks_secret_value(value) else value
        return self.value(value)


def mask(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of `value` with secret-looking environment values and every secret part of
    its strings hidden (`secrets`: the values the config names, `configured_secrets`)."""
    return Masker(secrets).value(value)


def mask_plan(plan: Mapping[str, Any], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """A sync's plan as a reader sees it: each change's old and new values masked as the
    field they come from is (`spec.env.TOKEN` by its name and its looks, any other field
    by its secret parts), and the rest (reasons, problems) by its secret parts."""
    masker = Masker(secrets)
    shown = masker.value({k: v for k, v in plan.items() if k != "actions"})
    shown["actions"] = []
    for action in plan.get("actions") or []:
        if not isinstance(action, dict):
            shown["actions"].append(masker.value(action))
            continue
        out = masker.value({k: v for k, v in action.items() if k != "changes"})
        out["changes"] = [mask_change(masker, c) for c in action.get("changes") or []]
        shown["actions"].append(out)
    return shown


def mask_change(masker: Masker, change: Any) -> Any:
    """One `{path, old, new}`: each value masked inside the manifest's shape its path
    names, so an env entry is judged by its name as it is in the manifest."""
    if not isinstance(change, dict) or not isinstance(change.get("path"), str):
        return masker.value(change)
    segments = [p for p in re.split(r"[.\[\]]+", change["path"]) if p]
    out = masker.value({k: v for k, v in change.items() if k not in ("old", "new")})
    out["path"] = change["path"] if not masker.spans(change["path"]) else out["path"]
    for side in ("old", "new"):
        if side in change:
            nested: Any = change[side]
            for segment in reversed(segments):
                nested = {segment: nested}
            masked = masker.value(nested)
            for _ in segments:  # one key at each level: walk back down
                masked = next(iter(masked.values()))
            out[side] = masked
    return out
