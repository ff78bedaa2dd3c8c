"""Keeping credentials out of what is shown: URLs in messages, pages and logs, the secrets
a component holds in the errors it raises, and the secrets a text holds by their looks.

Looks are judged by a published rule set, gitleaks' (secret_rules/gitleaks.toml, kept as
gitleaks publishes it), extended by the project's own rules in the same format
(secret_rules/nodus.toml). The rules are RE2 expressions, run with RE2 as gitleaks runs
them: in time linear in the text, whatever a manifest's author writes into it.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import re2

# A secret shorter than this is not masked: replacing every "ab" in a message would hide
# the message, not the secret.
_SHORTEST_SECRET = 4
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*):[^@/\s]*@")
_SURROGATE = re.compile("[\ud800-\udfff]")
RULES_FILE = Path(__file__).with_name("secret_rules") / "nodus.toml"
# Texts whose secrets are remembered (a page shows the same strings on every render).
_REMEMBERED = 8192
_REMEMBERED_LENGTH = 4096
_RULE_KEYS = frozenset({"id", "description", "regex", "secretGroup", "entropy", "keywords",
                        "allowlists", "path", "tags"})
_ALLOW_KEYS = frozenset({"description", "regexes", "regexTarget", "stopwords", "condition",
                         "paths", "commits"})


def url_without_userinfo(url: str) -> str:
    """`url` without its user:password part, for messages; scp-like URLs and paths as is."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def mask_url_passwords(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it replaced by ***."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def scrub(text: str, secrets: Iterable[str], mask: str = "***") -> str:
    """`text` with every secret held in `secrets` replaced by `mask`."""
    for secret in secrets:
        if secret and len(secret) >= _SHORTEST_SECRET:
            text = text.replace(secret, mask)
    return text


# -- secrets by their looks ---------------------------------------------------------------

def entropy(text: str) -> float:
    """Shannon entropy of `text`, in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _words(words: Sequence[str]) -> Any:
    """One RE2 set that finds which of `words` a text holds, in any case, in one pass."""
    options = re2.Options()
    options.case_sensitive = False
    found = re2.Set.SearchSet(options)
    for word in words:
        found.Add(re2.escape(word))
    found.Compile()
    return found


@dataclass(frozen=True)
class Allowlist:
    """What a finding may be and still not be a secret (gitleaks' `[[rules.allowlists]]`:
    a regex over the secret, the whole match or its line, or a stop word in the secret)."""

    target: str  # "secret", "match" or "line"
    regexes: tuple[Any, ...]
    stopwords: Any  # an RE2 set, or None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> Allowlist | None:
        """None for one that can never apply to a text: it needs a path or a commit too."""
        unknown = set(raw) - _ALLOW_KEYS
        if unknown:
            raise ValueError(f"{where}: allowlist keys {sorted(unknown)} are not understood")
        if raw.get("condition", "OR").upper() == "AND" and (raw.get("paths")
                                                             or raw.get("commits")):
            return None
        regexes = tuple(re2.compile(r) for r in raw.get("regexes") or ())
        words = [w.lower() for w in raw.get("stopwords") or ()]
        if not regexes and not words:
            return None
        return cls(raw.get("regexTarget") or "secret", regexes, _words(words) if words
                   else None)

    def allows(self, secret: str, match: str, line: str) -> bool:
        target = {"secret": secret, "match": match, "line": line}[self.target]
        return (any(r.search(target) for r in self.regexes)
                or (self.stopwords is not None and bool(self.stopwords.Match(secret))))


@dataclass(frozen=True)
class SecretRule:
    """One rule: an RE2 expression, the group it hides, its keywords and its floor."""

    id: str
    regex: Any
    keywords: tuple[str, ...]
    group: int = 0
    min_entropy: float = 0.0
    allowlists: tuple[Allowlist, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> SecretRule | None:
        """None for a rule about file paths, which no text can meet."""
        unknown = set(raw) - _RULE_KEYS
        rule_id = str(raw.get("id"))
        if unknown:
            raise ValueError(f"rule {rule_id}: keys {sorted(unknown)} are not understood")
        if "path" in raw or "regex" not in raw:
            return None
        allow = (Allowlist.parse(a, f"rule {rule_id}") for a in raw.get("allowlists") or ())
        return cls(rule_id, re2.compile(raw["regex"]),
                   tuple(k.lower() for k in raw.get("keywords") or ()),
                   int(raw.get("secretGroup") or 0), float(raw.get("entropy") or 0.0),
                   tuple(a for a in allow if a is not None))

    def spans(self, text: str) -> Iterable[tuple[int, int]]:
        """Where this rule's secrets stand in `text`."""
        for m in self.regex.finditer(text):
            if self.group:
                start, end = m.span(self.group)
            else:
                start, end = next((m.span(g) for g in range(1, self.regex.groups + 1)
                                   if m.span(g)[1] > m.span(g)[0]), m.span())
            while start < end and text[start] == "\n":
                start += 1
            while end > start and text[end - 1] == "\n":
                end -= 1
            secret = text[start:end]
            if not secret or (self.min_entropy and entropy(secret) <= self.min_entropy):
                continue
            line = text[text.rfind("\n", 0, m.start()) + 1:_line_end(text, m.end())]
            if any(a.allows(secret, m.group(), line) for a in self.allowlists):
                continue
            yield start, end


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


class SecretRules:
    """A rule set, loaded once: which parts of a text are secrets by their looks."""

    def __init__(self, rules: Sequence[SecretRule]):
        self.rules = tuple(rules)
        keywords = sorted({k for r in self.rules for k in r.keywords})
        self._keyword_rules = [tuple(r for r in self.rules if k in r.keywords)
                               for k in keywords]
        self._always = tuple(r for r in self.rules if not r.keywords)
        self._keywords = _words(keywords) if keywords else None

    @classmethod
    def load(cls, path: Path = RULES_FILE) -> SecretRules:
        """The rules of `path`, over those of the file its `[extend] path` names (a rule
        with the id of an extended one replaces it; `disabledRules` drops some). A file's
        global allowlist holds for its own rules: gitleaks' takes a one-letter secret for
        a placeholder, where a URL's one-letter password is still a password."""
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        rules: dict[str, SecretRule | None] = {}
        extend = raw.get("extend") or {}
        if extend.get("path"):
            rules.update((r.id, r) for r in cls.load(path.with_name(extend["path"])).rules)
        for rule_id in extend.get("disabledRules") or ():
            rules.pop(rule_id, None)
        everywhere = [Allowlist.parse(entry, f"{path.name}: the global allowlist") for entry
                      in ([raw["allowlist"]] if "allowlist" in raw else
                          raw.get("allowlists") or ())]
        shared = tuple(a for a in everywhere if a is not None)
        for entry in raw.get("rules") or ():
            rule = SecretRule.parse(entry)
            rules[str(entry["id"])] = rule and replace(rule,
                                                       allowlists=shared + rule.allowlists)
        return cls([r for r in rules.values() if r is not None])

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the secrets in `text` stand, in order, overlaps merged."""
        if not text:
            return []
        if not text.isascii():  # RE2 reads UTF-8: a lone surrogate (a file name's byte
            # that was not UTF-8) becomes U+FFFD, one character for one, so spans hold
            text = _SURROGATE.sub("\ufffd", text)
        candidates = list(self._always)
        if self._keywords is not None:
            for index in self._keywords.Match(text) or ():
                candidates += self._keyword_rules[index]
        return merge_spans(span for rule in dict.fromkeys(candidates)
                           for span in rule.spans(text))


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with the overlapping and touching ones made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        elif end > start:
            merged.append((start, end))
    return merged


@functools.cache
def secret_rules() -> SecretRules:
    """The shipped rule set (secret_rules/), loaded on first use."""
    return SecretRules.load()


def secret_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Where the secrets that `text` holds by their looks stand (the shipped rules)."""
    if len(text) > _REMEMBERED_LENGTH:
        return tuple(secret_rules().spans(text))
    return _remembered_spans(text)


@functools.lru_cache(maxsize=_REMEMBERED)
def _remembered_spans(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(secret_rules().spans(text))
