"""env in either form a manifest may write it, as the one mapping the backends run with."""

from __future__ import annotations

import pytest
from nodus_gitops.envvars import ENTRY_KEYS, ONLY_NAME_AND_VALUE, EnvError, env_mapping, reserved


def test_the_mapping_form_passes_through() -> None:
    env = {"LOG_LEVEL": "debug", "NODUS_PARAM_X": "1"}
    assert env_mapping(env) == env
    assert env_mapping(env) is not env  # a copy: callers may add to it


def test_the_kubernetes_list_form_becomes_the_mapping_in_order() -> None:
    env = [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}, {"name": "EMPTY"}]
    assert list(env_mapping(env).items()) == [("B", "2"), ("A", "1"), ("EMPTY", "")]


@pytest.mark.parametrize("empty", [None, {}, []])
def test_no_env(empty: object) -> None:
    assert env_mapping(empty) == {}


@pytest.mark.parametrize("env, words", [
    ("STEPS=300", "env: expected a mapping of NAME: value or a list of {name, value}"),
    (["STEPS=300"], "env[0]: expected a mapping with name and value"),
    ([{"value": "x"}], "env[0].name: required"),
    ([{"name": 5, "value": "x"}], "env[0].name: expected a string"),
    ([{"name": "STEPS", "value": 300}], "env[0].value: expected a string"),
    ([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s"}}}], "env[0].valueFrom: "),
    ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
     "env[1].name: 'A' is set twice (env[0] and env[1])"),
    ({"STEPS": 300}, "env.STEPS: expected a string"),
])
def test_what_validation_refuses_raises(env: object, words: str) -> None:
    with pytest.raises(EnvError) as e:
        env_mapping(env)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)


def test_value_from_says_what_is_supported() -> None:
    with pytest.raises(EnvError, match="only name and value"):
        env_mapping([{"name": "T", "valueFrom": {"fieldRef": {}}}])


@pytest.mark.parametrize("name, is_reserved", [
    ("NODUS_JOB", True), ("NODUS_", True), ("NODUS_PARAM_X", False), ("NODUS_PARAM_", False),
    ("NODUSX", False), ("nodus_job", False), ("LOG_LEVEL", False),
])
def test_reserved_names(name: str, is_reserved: bool) -> None:
    assert reserved(name) is is_reserved


def test_the_schema_says_the_same_about_value_from() -> None:
    from nodus_gitops import schemas
    entry = schemas.load(schemas.SHARED_FILE)["$defs"]["envVar"]
    assert entry["additionalPropertiesErrorMessage"] == ONLY_NAME_AND_VALUE
    assert tuple(entry["properties"]) == ENTRY_KEYS
