"""A manifest file's own text at a commit, as the dashboard shows it: read from the
binding's Git mirror, numbered line by line with `id="L<n>"` anchors, and with every value
the dashboard's masking (`redact.mask`) would hide replaced in place, so that a secret
never reaches the page while the lines keep their numbers.

The resource page shows its manifest this way, and /repos/<binding>/files/<commit>/<path>
is one file on a page of its own, which problems link to at `#L<line>`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml
from nodus_gitops.floor.errors import ManifestError, SourceError
from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.manifests import Document, Oversized, is_manifest_path, load_documents
from nodus_gitops.web.format import commit_link, now_text
from nodus_gitops.web.html import Safe, esc, layout, path, tag
from nodus_gitops.web.redact import MASK, configured_secrets, mask, mask_text

if TYPE_CHECKING:
    from nodus_gitops.service import Service

_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")


@dataclass(frozen=True)
class SourceFile:
    """One file at one commit, masked: its text, how many of its lines had something
    hidden, its documents (None when it is not valid YAML, with the parse error), and the
    lines each resource it declares spans."""

    binding: str
    commit: str
    path: str
    text: str
    masked: int
    documents: list[Document] | None
    parse_error: str | None = None
    # (kind, name, first line, last line) of each document that names both
    declared: tuple[tuple[str, str, int, int], ...] = ()

    def lines_of(self, kind: str, name: str) -> tuple[int, int] | None:
        """The first and last line of the document declaring `kind` `name`, if any."""
        return next(((first, last) for k, n, first, last in self.declared
                     if (k, n) == (kind, name)), None)


def file_url(binding: str, commit: str, file: str, line: int | None = None) -> str:
    """Where the file page of `file` at `commit` is, at `line` when given."""
    url = path("repos", binding, "files", commit) + "/" + quote(file, safe="/")
    return f"{url}#L{line}" if line else url


def read(service: Service, binding: str, commit: str | None, file: str | None) -> SourceFile | str:
    """`file` at `commit` in `binding`'s repository, masked; or why it cannot be shown (a
    sentence). Only manifest files (`.yaml`, `.yml`) under the binding's path are read."""
    sync = service.syncs.get(binding)
    if sync is None:
        return f"the binding {binding} is not served here, so neither is its Git mirror"
    if not commit or not _COMMIT.match(commit):
        return "no source commit is recorded"
    if not file:
        return "no source file is recorded"
    prefix = "/".join(p for p in (sync.binding.path or "").split("/") if p not in ("", "."))
    parts = file.split("/")
    if not is_manifest_path(file) or ".." in parts or "" in parts or (
            prefix and not file.startswith(prefix + "/")):
        return f"{file} is not a manifest file under the binding's path"
    try:
        # its own handle: the sync loop uses the binding's source in another thread
        content = sync.source.reader().read_blobs(commit, [file])[file]
    except SourceError as exc:
        return str(exc)
    if isinstance(content, Oversized):
        return f"{file} is {content.size} bytes, over the manifest limit"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return f"{file} at {commit[:12]} is not UTF-8 text"
    return masked_file(binding, commit, file, text, configured_secrets(service.settings))


def masked_file(binding: str, commit: str, file: str, text: str,
                secrets: Iterable[str] = ()) -> SourceFile:
    """`text` with what the dashboard masks hidden in place, line for line. A value `mask`
    hides whole is replaced where the parse found it (a masked block scalar keeps its
    line count, as blank lines); then `redact.mask_text` hides the rest: token shapes and
    configured secrets anywhere (scripts and comments too), and env entries line by line
    in a file that does not parse."""
    try:
        documents: list[Document] | None = load_documents(file, text)
        parse_error = None
    except ManifestError as exc:
        documents, parse_error = None, str(exc)
    spans: list[tuple[int, int]] = []
    for doc in documents or []:
        if doc.node is not None:
            _hidden_spans(doc.node, doc.data, mask(doc.data, secrets), spans)
    out, last = [], 0
    for start, end in sorted(spans):
        out += [text[last:start], MASK + "\n" * text.count("\n", start, end)]
        last = end
    out.append(text[last:])
    shown = mask_text("".join(out), secrets)
    changed = sum(a != b for a, b in zip(text.split("\n"), shown.split("\n"), strict=False))
    return SourceFile(binding, commit, file, shown, changed, documents, parse_error,
                      declared=tuple(_declared(text, documents or [])))


def _declared(text: str, documents: list[Document]) -> list[tuple[str, str, int, int]]:
    found = []
    for doc in documents:
        data = doc.data if isinstance(doc.data, dict) else {}
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        if isinstance(data.get("kind"), str) and isinstance(meta.get("name"), str) and (
                doc.node is not None):
            found.append((data["kind"], meta["name"], doc.line, _last_line(text, doc.node)))
    return found


def _hidden_spans(node: yaml.Node, value: Any, shown: Any,
                  spans: list[tuple[int, int]]) -> None:
    """The character spans of the values `mask` hid whole (`shown` is `value` masked);
    a string it hid only a part of is left to `mask_text`."""
    if shown == value:
        return
    if isinstance(node, yaml.MappingNode) and isinstance(value, dict) and isinstance(
            shown, dict):
        for key_node, value_node in node.value:
            key = _key(key_node, value)
            if key is not _MISSING and key in shown:
                _hidden_spans(value_node, value[key], shown[key], spans)
        return
    if isinstance(node, yaml.SequenceNode) and isinstance(value, list) and isinstance(
            shown, list):
        for item_node, item, item_shown in zip(node.value, value, shown, strict=False):
            _hidden_spans(item_node, item, item_shown, spans)
        return
    if shown == MASK:
        spans.append((node.start_mark.index, node.end_mark.index))


_MISSING = object()


def _key(node: yaml.Node, mapping: dict[Any, Any]) -> Any:
    """The key of `mapping` that `node` (a key's node) was read as."""
    if not isinstance(node, yaml.ScalarNode):
        return _MISSING
    if node.value in mapping:
        return node.value
    return next((k for k in mapping if str(k) == node.value), _MISSING)


def _last_line(text: str, node: yaml.Node) -> int:
    """The last line holding `node`'s text (its end mark may sit at the next line's start)."""
    end = node.end_mark.index
    while end > node.start_mark.index and text[end - 1] in " \t\r\n":
        end -= 1
    return text.count("\n", 0, end) + 1


def listing(source: SourceFile, own: tuple[int, int] | None = None) -> Safe:
    """The text numbered: one `<span id="L<n>">` per line with a link to itself; the lines
    of `own` (a resource's document) marked."""
    lines = source.text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    for n, line in enumerate(lines, start=1):
        mine = own is not None and own[0] <= n <= own[1]
        rows.append(tag("span", tag("a", n, href=f"#L{n}", class_="ln", aria_hidden="true"),
                        tag("span", line, class_="code"), "\n", id=f"L{n}",
                        class_="line own" if mine else "line"))
    return tag("pre", *rows, class_="source", data_file=source.path)


def file_page(service: Service, binding: str, commit: str, file: str) -> tuple[int, bytes]:
    source = read(service, binding, commit, file)
    if isinstance(source, str):
        return 404, layout("Not found", tag("p", f"No file {file} at {commit}: {source}."))
    record = service.store.get_binding(binding)
    repo_url = url_without_userinfo(record.url) if record else None
    facts = tag("p", tag("a", binding, href=path("repos", binding)), " · ",
                tag("code", file), " at ", commit_link(repo_url, commit), class_="muted")
    body: list[Any] = [facts]
    if source.masked:
        body.append(tag("p", "Secret-looking values are masked on "
                        f"{source.masked} line{'s' if source.masked != 1 else ''}.",
                        class_="muted", data_field="masked"))
    if source.parse_error:
        body.append(tag("p", "This file is not valid YAML: ", esc(source.parse_error),
                        class_="error"))
    body.append(listing(source))
    return 200, layout(file, body, page="file", generated=now_text())
