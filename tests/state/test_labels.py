"""The inventory's labels table, on SQLite and PostgreSQL: a label selector answers the
rows a filter over the manifests answers, for any resources and selectors, and the labels
follow the manifest as the store rewrites or forgets a resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import InventoryRecord, Store
from nodus_gitops.web.queries import resources_page
from nodus_gitops.web.search import LabelTerm, ResourceSearch
from sqlalchemy import text

KEYS = ("team", "env", "app.kubernetes.io/name", "gpu")
VALUES = ("ml", "infra", "prod", "a-1", "")

labels_of = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
term = st.one_of(
    st.builds(LabelTerm, st.sampled_from(KEYS), st.sampled_from(["=", "!="]),
              st.sampled_from(VALUES)),
    st.builds(LabelTerm, st.sampled_from(KEYS), st.sampled_from(["exists", "absent"])),
)


def _record(name: str, labels: dict[str, Any], binding: str = "team-a") -> InventoryRecord:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return InventoryRecord(ResourceKey("Job", "proj-a", name), binding,
                           {"kind": "Job", "metadata": metadata}, "h")


def _matches(labels: dict[str, Any], t: LabelTerm) -> bool:
    """Kubernetes' reading of one selector term, over a manifest's labels."""
    if t.op == "=":
        return labels.get(t.key) == t.value
    if t.op == "!=":
        return labels.get(t.key) != t.value
    return (t.key in labels) == (t.op == "exists")


def _found(store: Store, terms: tuple[LabelTerm, ...]) -> tuple[set[str], int]:
    records, total = resources_page(store, ResourceSearch(labels=terms, page_size=500))
    return {r.key.name for r in records}, total


def _label_rows(store: Store) -> list[tuple[str, str, str]]:
    with store._engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(text(
            "SELECT i.name, l.key, l.value FROM inventory_label l "
            "JOIN inventory i ON i.id = l.inventory_id")))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(resources=st.lists(labels_of, max_size=12),
       rewritten=st.dictionaries(st.integers(0, 11), labels_of, max_size=4),
       selectors=st.lists(st.lists(term, min_size=1, max_size=3).map(tuple), min_size=1,
                          max_size=4))
def test_a_label_selector_answers_what_the_manifests_say(
    store: Store, resources: list[dict[str, str]], rewritten: dict[int, dict[str, str]],
    selectors: list[tuple[LabelTerm, ...]],
) -> None:
    store.remove_resources([r.key for r in store.list_inventory()])
    store.upsert_resources([_record(f"r-{i}", labels) for i, labels in enumerate(resources)])
    # Some rewritten, a few twice in one batch (the last one counts), as a sync may.
    again = [_record(f"r-{i}", labels) for i, labels in rewritten.items() if i < len(resources)]
    store.upsert_resources(again + again[:1])
    manifests = {r.key.name: r.manifest["metadata"].get("labels", {})
                 for r in store.list_inventory()}
    for terms in selectors:
        expected = {n for n, labels in manifests.items()
                    if all(_matches(labels, t) for t in terms)}
        assert _found(store, terms) == (expected, len(expected)), terms


def test_the_labels_follow_a_manifest_change_and_a_delete(store: Store) -> None:
    store.upsert_resources([_record("a", {"team": "ml", "env": "prod"}),
                            _record("b", {"team": "ml"}), _record("c", {})])
    assert _label_rows(store) == [("a", "env", "prod"), ("a", "team", "ml"), ("b", "team", "ml")]
    team_ml = (LabelTerm("team", "=", "ml"),)
    assert _found(store, team_ml) == ({"a", "b"}, 2)

    store.upsert_resource(_record("a", {"team": "infra"}))  # env gone, team changed
    store.upsert_resource(_record("c", {"team": "ml"}))
    assert _label_rows(store) == [("a", "team", "infra"), ("b", "team", "ml"),
                                  ("c", "team", "ml")]
    assert _found(store, team_ml) == ({"b", "c"}, 2)
    assert _found(store, (LabelTerm("env", "exists"),)) == (set(), 0)

    assert store.remove_resource(ResourceKey("Job", "proj-a", "b"))
    store.remove_resources([ResourceKey("Job", "proj-a", "c")])
    assert _label_rows(store) == [("a", "team", "infra")]
    assert _found(store, team_ml) == (set(), 0)
    assert _found(store, (LabelTerm("team", "!=", "ml"),)) == ({"a"}, 1)


@pytest.mark.parametrize("labels", [None, "not a mapping", {"n": 1, "ok": "yes", "b": True}])
def test_only_string_labels_are_labels(store: Store, labels: Any) -> None:
    """What the schema allows (string values); anything else no selector matches, as a
    read of the manifest would have it."""
    store.upsert_resource(_record("odd", labels))
    assert _label_rows(store) == ([("odd", "ok", "yes")] if isinstance(labels, dict) else [])


def test_a_resource_of_an_unknown_binding_writes_no_labels(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    with pytest.raises(KeyError, match="upsert_binding first"):
        store.upsert_resource(_record("a", {"team": "ml"}, binding="nobody"))
    assert _label_rows(store) == []
