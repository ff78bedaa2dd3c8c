"""Masking for the dashboard and the API (`floor.masking` has the rules): a resource's
record, its events, a sync, and a manifest file's own YAML text line for line; and the
secrets the config names (`configured_secrets`), hidden wherever they appear.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nodus_gitops.floor.masking import (  # noqa: F401 (the web's names for them)
    MASK,
    MIN_SECRET,
    Masker,
    high_entropy,
    looks_secret,
    mask,
    mask_change,
    mask_plan,
)

if TYPE_CHECKING:
    from nodus_gitops.config import Binding, Settings
    from nodus_gitops.state.records import EventRecord, InventoryRecord, SyncRecord


def mask_record(r: InventoryRecord, secrets: Iterable[str] = ()) -> InventoryRecord:
    """`r` with what a reader sees of it besides its manifest masked: reason, message,
    fix and status (a backend's message may quote a URL with its password, a command
    line with a token)."""
    masker = Masker(secrets)
    return replace(r, reason=masker.value(r.reason), message=masker.value(r.message),
                   fix=masker.value(r.fix), status=masker.value(r.status))


def mask_events(events: Iterable[EventRecord], secrets: Iterable[str] = ()) -> list[EventRecord]:
    """The events with their messages masked."""
    masker = Masker(secrets)
    return [replace(e, message=masker.value(e.message)) for e in events]


def mask_sync(s: SyncRecord, secrets: Iterable[str] = ()) -> SyncRecord:
    """A sync with its message and plan masked."""
    return replace(s, message=Masker(secrets).value(s.message),
                   plan=mask_plan(s.plan or {}, secrets))



# -- a manifest file's own text ----------------------------------------------------------

_ENV_HEADER = re.compile(
    r"^(?P<lead>[ \t]*(?:-[ \t]+)*)(?P<q>[\"']?)(?:env|params)(?P=q)[ \t]*:(?P<rest>.*)$")
_FLOW_SECTION = re.compile(r"(?:^|[\s{,])[\"']?(?:env|params)[\"']?[ \t]*:[ \t]*(?=[\[{])")
_ENTRY = re.compile(r"^(?P<lead>[ \t]*(?:-[ \t]+)?)(?P<q>[\"']?)(?P<key>[^\s\"'#:{}\[\],-]"
                    r"[^\"'#:{}\[\],]*?)(?P=q)[ \t]*:(?=[ \t]|$)(?P<rest>.*)$")
_FLOW_PAIR = re.compile(r"(?P<key>\"[^\"]*\"|'[^']*'|[^\s{},:\[\]\"'][^{},:\[\]]*?)\s*:\s+"
                        r"(?P<val>\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^,{}\[\]]*[^,{}\[\]\s])")
_FLOW_ITEM = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^\s,\[\]][^,\[\]]*[^\s,\[\]]"
                        r"|[^\s,\[\]]")


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A manifest file's own YAML text with what `mask` hides replaced in place, line for
    line (the same line breaks, so line numbers hold): the value part of `NAME: value`
    (and `- name:`/`value:`) under an `env` or `params` whose name or value looks secret,
    and every token shape and configured secret anywhere, comments included."""
    masker = Masker(secrets)
    lines = masker.text(text).splitlines(keepends=True)
    bodies = [line.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029") for line in lines]
    ends = [line[len(body):] for line, body in zip(lines, bodies, strict=True)]
    i = 0
    while i < len(bodies):
        bodies[i] = _mask_flow_sections(masker, bodies[i])
        header = _ENV_HEADER.match(bodies[i])
        i += 1
        if header is None or _drop_comment(header["rest"]).strip():
            continue
        column, end = len(header["lead"]), i
        while end < len(bodies) and _inside(bodies[end], column):
            end += 1
        _mask_section(masker, bodies, i, end)
        i = end
    return "".join(body + end for body, end in zip(bodies, ends, strict=True))


def _mask_flow_sections(masker: Masker, line: str) -> str:
    """`env: {A: b}` or `env: [{name: A, value: b}]` written on one line, wherever."""
    out, last = [], 0
    for m in _FLOW_SECTION.finditer(line):
        if m.start() < last:
            continue
        start, depth, quote = m.end(), 0, ""
        for end in range(start, len(line)):
            c = line[end]
            if quote:
                quote = "" if c == quote else quote
            elif c in "\"'":
                quote = c
            elif c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
                if depth == 0:
                    break
        else:
            end = len(line) - 1
        out += [line[last:start], _mask_flow(masker, line[start:end + 1])]
        last = end + 1
    return "".join(out) + line[last:]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _blank(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def _inside(line: str, column: int) -> bool:
    """Whether `line` belongs to the section whose key stands at `column`."""
    return _blank(line) or _indent(line) > column or (
        _indent(line) == column and line.lstrip().startswith("- "))


def _drop_comment(rest: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", rest) if "#" in rest else rest


def _mask_section(masker: Masker, bodies: list[str], start: int, end: int) -> None:
    """The lines of one `env`/`params` section, entry by entry."""
    rows = [n for n in range(start, end) if not _blank(bodies[n])]
    if not rows:
        return
    column = _indent(bodies[rows[0]])
    heads = [n for n in rows if _indent(bodies[n]) == column] + [end]
    for head, after in zip(heads, heads[1:], strict=False):
        if bodies[head].lstrip().startswith("- "):
            _mask_list_entry(masker, bodies, head, after)
        else:
            _mask_entry(masker, bodies, head, after, name=None)


def _mask_entry(masker: Masker, bodies: list[str], head: int, after: int,
                name: str | None) -> None:
    """`NAME: value` (with its continuation lines up to `after`); for a list entry's
    `value:`, `name` is the entry's name."""
    m = _ENTRY.match(bodies[head])
    if m is None:
        return
    secret_name = looks_secret(name if name is not None else m["key"])
    at = len(bodies[head]) - len(m["rest"])
    start, stop, value = _scalar(m["rest"])
    if value.startswith("[") and not secret_name:  # a parameter's values, one line
        shown = _mask_items(masker, m["rest"][start:stop])
    else:
        hide = secret_name or (value and masker.looks_secret_value(value))
        shown = MASK if hide and value else m["rest"][start:stop]
    bodies[head] = bodies[head][:at] + m["rest"][:start] + shown + m["rest"][stop:]
    for n in range(head + 1, after):
        line = bodies[n]
        if _blank(line):
            continue
        content = line.lstrip(" \t")
        content = content[2:].lstrip() if content.startswith("- ") else content
        if secret_name or masker.looks_secret_value(content.strip("\"' ")):
            bodies[n] = line[:len(line) - len(content)] + MASK


def _mask_list_entry(masker: Masker, bodies: list[str], head: int, after: int) -> None:
    """`- name: X` / `value: Y` in either order, or `- {name: X, value: Y}`."""
    first = bodies[head]
    lead = _indent(first) + 2 + (len(first[_indent(first) + 2:]) -
                                 len(first[_indent(first) + 2:].lstrip()))
    if first[lead:].startswith("{"):
        bodies[head] = first[:lead] + _mask_flow(masker, "[" + first[lead:])[1:]
        return
    keys: dict[str, int] = {}
    for n in range(head, after):
        m = _ENTRY.match(bodies[n][lead:] if n == head else bodies[n])
        if m is not None and m["key"] in ("name", "value") and (
                n == head or _indent(bodies[n]) == lead):
            keys.setdefault(m["key"], n)
    if "value" not in keys:
        return
    name = ""
    if "name" in keys:
        line = bodies[keys["name"]]
        m = _ENTRY.match(line[lead:] if keys["name"] == head else line)
        name = _scalar(m["rest"])[2] if m else ""
    row = keys["value"]
    block_end = next((n for n in range(row + 1, after)
                      if not _blank(bodies[n]) and _indent(bodies[n]) <= lead), after)
    if row == head:  # `- value: Y` first: mask it as its own line, the dash kept
        prefix, bodies[head] = first[:lead], first[lead:]
        _mask_entry(masker, bodies, head, block_end, name=name)
        bodies[head] = prefix + bodies[head]
    else:
        _mask_entry(masker, bodies, row, block_end, name=name)


def _scalar(rest: str) -> tuple[int, int, str]:
    """Where the value after `key:` stands in `rest`, and the value unquoted."""
    start = len(rest) - len(rest.lstrip(" \t"))
    body = rest[start:]
    if body[:1] in ("\"", "'"):
        q = body[0]
        m = re.match(r"\"(?:[^\"\\]|\\.)*\"?" if q == "\"" else r"'(?:[^']|'')*'?", body)
        stop = start + (m.end() if m else len(body))
        return start, stop, rest[start + 1:stop].rstrip(q)
    plain = _drop_comment(body).rstrip()
    return start, start + len(plain), plain


def _mask_items(masker: Masker, flow: str) -> str:
    """`[a, b]`: the items that look secret hidden."""
    return _FLOW_ITEM.sub(lambda m: MASK if masker.looks_secret_value(
        m.group().strip("\"'")) else m.group(), flow)


def _mask_flow(masker: Masker, flow: str) -> str:
    """An env or params section written on one line, in flow style."""
    def pairs(group: str, in_list: bool) -> str:
        found = list(_FLOW_PAIR.finditer(group))
        names = {m["key"].strip("\"'"): m["val"].strip("\"'") for m in found}
        out, last = [], 0
        for m in found:
            key, value = m["key"].strip("\"'"), m["val"].strip("\"'")
            if in_list and key != "value":
                continue
            name = names.get("name", "") if in_list else key
            if looks_secret(name) or masker.looks_secret_value(value):
                out += [group[last:m.start("val")], MASK]
                last = m.end("val")
        return "".join(out) + group[last:]

    if flow.lstrip().startswith("["):
        return re.sub(r"\{[^{}]*\}", lambda m: pairs(m.group(), True), flow)
    return pairs(flow, False)


# -- the secrets the config names --------------------------------------------------------

_SETTING_SECRET = re.compile(r"token|secret|password|passphrase|apikey|privatekey|key-data"
                             r"|client-key", re.IGNORECASE)
_DEFAULT_SECRET_VARS = ("GITHUB_TOKEN", "GITLAB_TOKEN", "GITEA_TOKEN", "NODUS_API_KEY",
                        "SLURM_JWT")
# Variables of this process whose names say they hold a secret, whatever the settings say.
_SECRET_VAR = re.compile(r"token|secret|passw(or)?d|passphrase|api_?key|private_?key"
                         r"|credential", re.IGNORECASE)
_SHORTEST_VAR_SECRET = 8  # a process variable's value shorter than this is too common


def configured_secrets(settings: Settings, environ: Mapping[str, str] | None = None,
                       ) -> frozenset[str]:
    """Every secret value `settings` names or leads to: the bindings' Git credentials (URL
    user-info, credentials files and variables, SSH key passphrases), the GitHub App's
    private key and the tokens minted for it, the check writers' and the providers'
    tokens (`*Env`, `*File`, a kubeconfig's), the webhook secrets, the dashboard token and
    Basic password, and the variables of this process named like a secret. A file that
    cannot be read gives nothing (its error is the component's to report)."""
    from nodus_gitops.web.hooks import HOSTS, resolve_secret

    env = os.environ if environ is None else environ
    found: list[str] = []
    for binding in settings.bindings:
        found += _binding_secrets(binding, env)
    for section in (settings.checks, settings.dashboard, *settings.providers.values()):
        found += _setting_secrets(section, env)
    webhooks = settings.checks.get("webhooks")
    for host in HOSTS:
        found.append(resolve_secret(host, webhooks if isinstance(webhooks, Mapping) else {},
                                    env) or "")
    found += [env.get(name, "") for name in _DEFAULT_SECRET_VARS]
    found += [v for k, v in env.items() if _SECRET_VAR.search(k)
              and len(v.strip()) >= _SHORTEST_VAR_SECRET]
    if settings.github_app is not None:
        found += _private_key_texts(settings.github_app)
    return frozenset(_forms(found, settings, env))


def _binding_secrets(binding: Binding, env: Mapping[str, str]) -> Iterator[str]:
    from nodus_gitops.floor.errors import NodusGitopsError
    from nodus_gitops.hosts.credentials import Credentials
    from nodus_gitops.hosts.urls import split_repo_url

    held = []
    if binding.url_credentials is not None:
        held.append(binding.url_credentials[1])
    try:
        if binding.credentials_file:
            held.append(Credentials.from_file(binding.credentials_file))
        if binding.credentials_env:
            held.append(Credentials.from_env(binding.credentials_env, env))
    except NodusGitopsError:
        pass
    for creds in held:
        yield from (creds.password or "", creds.ssh_passphrase or "")
        if creds.username and creds.password:  # as an Authorization: Basic header has it
            yield base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        if creds.ssh_key:
            yield _read(creds.ssh_key)
    if binding.github_app is not None:
        try:
            yield from binding.github_app.minted(split_repo_url(binding.url)[1])
        except ValueError:
            pass


def _setting_secrets(raw: Any, env: Mapping[str, str]) -> Iterator[str]:
    """`fooEnv` and `fooFile` settings (and literal values) whose names say secret, at any
    depth; a kubeconfig named by a `kubeconfig` setting is read the same way."""
    if isinstance(raw, list):
        for item in raw:
            yield from _setting_secrets(item, env)
        return
    if not isinstance(raw, Mapping):
        return
    for key, value in raw.items():
        key = str(key)
        if isinstance(value, Mapping | list):
            yield from _setting_secrets(value, env)
        elif not isinstance(value, str | int) or isinstance(value, bool):
            continue
        elif key.endswith("Env") and _SETTING_SECRET.search(key[:-3]):
            yield env.get(str(value), "")
        elif key.endswith("File") and _SETTING_SECRET.search(key[:-4]):
            yield _read(str(value))
        elif key == "kubeconfig":
            yield from _kubeconfig_secrets(str(value), env)
        elif _SETTING_SECRET.search(key):
            yield str(value)


def _kubeconfig_secrets(path: str, env: Mapping[str, str]) -> Iterator[str]:
    import yaml

    try:
        doc = yaml.safe_load(_read(path) or "null")
    except yaml.YAMLError:
        return
    for user in (doc or {}).get("users") or [] if isinstance(doc, dict) else []:
        if isinstance(user, dict):
            yield from _setting_secrets(user.get("user"), env)


def _private_key_texts(app: Any) -> list[str]:
    """The App's private key as PEM, in both forms a key file holds (PKCS#1 as GitHub
    gives it, PKCS#8): the loaded key is all the App keeps of the file."""
    from cryptography.hazmat.primitives import serialization

    key = getattr(app, "_key", None)
    if key is None:
        return []
    return [key.private_bytes(serialization.Encoding.PEM, form,
                              serialization.NoEncryption()).decode()
            for form in (serialization.PrivateFormat.TraditionalOpenSSL,
                         serialization.PrivateFormat.PKCS8)]


def _read(path: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _forms(values: Iterable[str], settings: Settings, env: Mapping[str, str]) -> Iterator[str]:
    """Each secret as it may be written elsewhere: itself, each line of a multi-line one
    (a PEM key's body), with its line breaks escaped, and percent-encoded (in a URL)."""
    from nodus_gitops.floor.errors import NodusGitopsError
    from nodus_gitops.web.auth import Auth

    values = list(values)
    try:
        auth = Auth.from_config(settings.dashboard, env)
    except NodusGitopsError:
        auth = None
    if auth is not None:
        values += [auth.token or "", auth.password or ""]
        if auth.user and auth.password:
            values.append(base64.b64encode(f"{auth.user}:{auth.password}".encode()).decode())
    for value in values:
        value = str(value).strip()
        if len(value) < MIN_SECRET:
            continue
        yield value
        yield quote(value, safe="")
        if "\n" in value:
            yield value.replace("\n", "\\n")
            yield from (line.strip() for line in value.splitlines()
                        if len(line.strip()) >= 16 and not line.startswith("-----"))
