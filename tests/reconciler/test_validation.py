"""The platform's rules: each case breaks one rule and expects its problem at its line."""

from __future__ import annotations

import textwrap

import pytest
from nodus_gitops.floor.gpu import effective_min_memory
from nodus_gitops.validation import validate_files

JOB = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: train
spec:
  image: python:3.12-slim
  command: [python3, -c, "print(1)"]
  timeout: 10m
  maxCostUSD: "0.25"
"""

PIPELINE = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: train-eval
spec:
  maxCostUSD: "0.50"
  defaults:
    image: python:3.12-slim
    command: [python3, -c, "print(1)"]
  stages:
    - name: prepare
      template:
        outputs:
          - name: shards
            path: /nodus/outputs/shards
    - name: train
      dependsOn: [prepare]
      inputs:
        - name: data
          fromStage: prepare
          output: shards
      template: {}
"""

SWEEP = """\
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: batch-size
spec:
  maxCostUSD: "0.75"
  matrix:
    gpu: [L4, A10]
    params:
      BATCH_SIZE: ["32", "64", "128"]
  template:
    kind: Job
    spec:
      command: [python3, bench.py]
"""


def problems_of(*docs: str, names: tuple[str, ...] | None = None) -> list:
    files = [(names[i] if names else f"m{i}.yaml", textwrap.dedent(d).encode())
             for i, d in enumerate(docs)]
    return validate_files(files).problems


def edit(base: str, old: str, new: str) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


def test_the_base_manifests_are_valid() -> None:
    assert problems_of(JOB, PIPELINE, SWEEP) == []


# (manifest, expected path, expected line, words the message must contain)
CASES = {
    "apiVersion": (edit(JOB, "nodus.dev/v1", "nodus.dev/v2"), "apiVersion", 1, "nodus.dev/v1"),
    "kind": (edit(JOB, "kind: Job", "kind: Deployment"), "kind", 2, "Job, Pipeline, Sweep"),
    "name not a DNS label": (edit(JOB, "name: train", "name: Train_1"), "metadata.name", 4,
                             "not a valid name"),
    "name too long": (edit(JOB, "name: train", "name: " + "a" * 64), "metadata.name", 4, "63"),
    "unknown top-level field": (JOB + "status: {}\n", "status", 10, "unknown field 'status'"),
    "unknown spec field": (edit(JOB, "  timeout: 10m", "  timeOut: 10m"), "spec.timeOut", 8,
                           "unknown field"),
    "missing command": (edit(JOB, '  command: [python3, -c, "print(1)"]\n', ""),
                        "spec.command", 5, "required"),
    "bad duration": (edit(JOB, "timeout: 10m", "timeout: 10x"), "spec.timeout", 8,
                     '"10x" is not a duration (use 90s, 10m, 2h)'),
    "bad expectedDuration": (JOB + "  expectedDuration: 1m30h\n", "spec.expectedDuration", 10,
                             "not a duration"),
    "bad queueTimeout": (JOB + "  placement:\n    queueTimeout: soon\n",
                         "spec.placement.queueTimeout", 11, "not a duration"),
    "bad minProgressDuration": (JOB + "  recovery:\n    minProgressDuration: 5\n",
                                "spec.recovery.minProgressDuration", 11, "expected a string"),
    "timeout and activeDeadlineSeconds": (JOB + "  activeDeadlineSeconds: 60\n",
                                          "spec.activeDeadlineSeconds", 10, "alias of timeout"),
    "maxCostUSD zero": (edit(JOB, '"0.25"', '"0"'), "spec.maxCostUSD", 9, "more than 0"),
    "maxCostUSD a number": (edit(JOB, '"0.25"', "0.25"), "spec.maxCostUSD", 9, 'quote it'),
    "maxCostUSD not decimal": (edit(JOB, '"0.25"', '"$5"'), "spec.maxCostUSD", 9,
                               "not a decimal amount"),
    "completeByTime not RFC 3339": (JOB + "  completeByTime: tomorrow\n", "spec.completeByTime",
                                    10, "RFC 3339"),
    "completeByTime impossible date": (JOB + "  completeByTime: 2026-13-01T00:00:00Z\n",
                                       "spec.completeByTime", 10, "RFC 3339"),
    "command not strings": (edit(JOB, '[python3, -c, "print(1)"]', "[python3, 5]"),
                            "spec.command[1]", 7, "expected a string"),
    "reserved env prefix": (JOB + "  env:\n    NODUS_JOB: x\n", "spec.env.NODUS_JOB", 11,
                            "reserved"),
    "reserved env prefix, list form": (JOB + "  env:\n    - name: LOG_LEVEL\n      value: debug\n"
                                       "    - name: NODUS_JOB\n      value: x\n",
                                       "spec.env[1].name", 13, "reserved"),
    "env name twice, list form": (JOB + "  env:\n    - {name: A, value: '1'}\n"
                                  "    - {name: B, value: '2'}\n    - {name: A, value: '3'}\n",
                                  "spec.env[2].name", 13, "env[0] and env[2]"),
    "env valueFrom": (JOB + "  env:\n    - name: TOKEN\n      valueFrom:\n"
                      "        secretKeyRef: {name: s, key: k}\n",
                      "spec.env[0].valueFrom", 12, "only name and value"),
    "env list bad name": (JOB + "  env:\n    - {name: 1BAD, value: x}\n", "spec.env[0].name",
                          11, "not an environment variable name"),
    "env list value a number": (JOB + "  env:\n    - name: STEPS\n      value: 300\n",
                                "spec.env[0].value", 12, "quote it"),
    "env list entry without a name": (JOB + "  env:\n    - value: x\n", "spec.env[0].name", 11,
                                      "required"),
    "env list entry a string": (JOB + "  env:\n    - STEPS=300\n", "spec.env[0]", 11,
                                "expected a mapping"),
    "env a string": (JOB + "  env: STEPS=300\n", "spec.env", 10, "expected a mapping or list"),
    "bad gpu request": (JOB + "  resources:\n    gpu: H100:0\n", "spec.resources.gpu", 11,
                        "not a GPU request"),
    "bad gpu object": (JOB + "  resources:\n    gpu: {type: L4, count: 0}\n",
                       "spec.resources.gpu.count", 11, "at least 1"),
    "bad minMemory": (JOB + "  resources:\n    gpu: {minMemory: lots}\n",
                      "spec.resources.gpu.minMemory", 11, "not a quantity"),
    "bad memory": (JOB + "  resources:\n    memory: 4GB\n", "spec.resources.memory", 11,
                   "not a quantity"),
    "completions zero": (JOB + "  completions: 0\n", "spec.completions", 10, "at least 1"),
    "parallelism zero": (JOB + "  parallelism: 0\n", "spec.parallelism", 10, "at least 1"),
    "backoffLimit negative": (JOB + "  backoffLimit: -1\n", "spec.backoffLimit", 10,
                              "at least 0"),
    "output outside /nodus/outputs": (
        JOB + "  outputs:\n    - name: r\n      path: /tmp/r.json\n", "spec.outputs[0].path", 12,
        "under /nodus/outputs"),
    "output with ..": (JOB + "  outputs:\n    - name: r\n      path: /nodus/outputs/../etc\n",
                       "spec.outputs[0].path", 12, "'..'"),
    "duplicate output names": (
        JOB + "  outputs:\n    - {name: r, path: /nodus/outputs/a}\n"
        "    - {name: r, path: /nodus/outputs/b}\n", "spec.outputs[1].name", 12, "twice"),
    "continuity": (JOB + "  recovery:\n    continuity: Sometimes\n",
                   "spec.recovery.continuity", 11, "Checkpointed, Restartable, Ephemeral"),
    "onInterruption": (JOB + "  recovery:\n    onInterruption: Retry\n",
                       "spec.recovery.onInterruption", 11, "Fail"),
    "state": (JOB + "  state: Paused\n", "spec.state", 10, "Running, Suspended, Cancelled"),
    "source repo": (JOB + "  source:\n    git:\n      repo: not a repo\n      ref: main\n",
                    "spec.source.git.repo", 12, "owner/repository"),
    "source ref required": (JOB + "  source:\n    git:\n      repo: org/repo\n",
                            "spec.source.git.ref", 11, "ref is required"),
    "source ref an option": (JOB + "  source:\n    git:\n      repo: org/repo\n"
                             "      ref: '--upload-pack=touch /tmp/x; echo'\n",
                             "spec.source.git.ref", 13, "never starts with '-'"),
    "source repo a path": (JOB + "  source:\n    git:\n      repo: /srv/team/hello\n"
                           "      ref: main\n", "spec.source.git.repo", 12,
                           "a path on this machine"),
    "source repo a relative path": (JOB + "  source:\n    git:\n      repo: team/..\n"
                                    "      ref: main\n", "spec.source.git.repo", 12,
                                    "not owner/repository or an https:// URL"),
    "source repo file URL": (JOB + "  source:\n    git:\n      repo: file:///srv/x.git\n"
                             "      ref: main\n", "spec.source.git.repo", 12,
                             "another transport"),
    "source repo http": (JOB + "  source:\n    git:\n      repo: http://github.com/a/b\n"
                         "      ref: main\n", "spec.source.git.repo", 12, "https://"),
    "source repo credentials": (JOB + "  source:\n    git:\n      repo: "
                                "https://me:tok@github.com/a/b\n      ref: main\n",
                                "spec.source.git.repo", 12, "credentials in the URL"),
    "stage names unique": (edit(PIPELINE, "- name: train", "- name: prepare"),
                           "spec.stages[1].name", 16, "twice"),
    "stage job name length": (edit(PIPELINE, "- name: train", "- name: " + "t" * 53),
                              "spec.stages[1].name", 16, "62"),
    "dependsOn unknown": (edit(PIPELINE, "dependsOn: [prepare]", "dependsOn: [prepare, clean]"),
                          "spec.stages[1].dependsOn[1]", 17, "not a stage"),
    "cycle": (edit(PIPELINE, "    - name: prepare\n", "    - name: prepare\n"
                   "      dependsOn: [train]\n"), "spec.stages[0].dependsOn", 12,
              "prepare -> train -> prepare"),
    "input not in dependsOn": (edit(PIPELINE, "dependsOn: [prepare]", "dependsOn: []"),
                               "spec.stages[1].inputs[0].fromStage", 20, "dependsOn"),
    "input output undeclared": (edit(PIPELINE, "output: shards", "output: model"),
                                "spec.stages[1].inputs[0].output", 21, "declares no output"),
    "failurePolicy": (edit(PIPELINE, '  maxCostUSD: "0.50"\n', '  maxCostUSD: "0.50"\n'
                           "  failurePolicy: Retry\n"), "spec.failurePolicy", 7,
                      "FailFast, RunIndependent"),
    "maxParallel": (edit(PIPELINE, '  maxCostUSD: "0.50"\n', '  maxCostUSD: "0.50"\n'
                         "  maxParallel: 0\n"), "spec.maxParallel", 7, "at least 1"),
    "stage cap above pipeline cap": (edit(PIPELINE, "      template: {}",
                                          '      template: {maxCostUSD: "0.60"}'),
                                     "spec.stages[1].template.maxCostUSD", 22, "exceeds"),
    "stage cap equal to pipeline cap": (edit(PIPELINE, "      template: {}",
                                             '      template: {maxCostUSD: "0.50"}'),
                                        "spec.stages[1].template.maxCostUSD", 22, "lower"),
    "defaults cap equal to pipeline cap": (
        edit(PIPELINE, "  defaults:\n", '  defaults:\n    maxCostUSD: "0.50"\n'),
        "spec.defaults.maxCostUSD", 8, "lower"),
    "stage without command": (edit(PIPELINE, '    command: [python3, -c, "print(1)"]\n', ""),
                              "spec.stages[0].template", 11, "no command"),
    "sweep target kind": (edit(SWEEP, "kind: Job\n    spec", "kind: Function\n    spec"),
                          "spec.template.kind", 12, "Unsupported"),
    "sweep gpu count": (edit(SWEEP, "gpu: [L4, A10]", "gpu: [" + ", ".join(["L4"] * 17) + "]"),
                        "spec.matrix.gpu", 8, "at most 16"),
    "sweep param name": (edit(SWEEP, "BATCH_SIZE:", "batch_size:"),
                         "spec.matrix.params.batch_size", 10, "parameter name"),
    "sweep param values strings": (edit(SWEEP, '["32", "64", "128"]', "[32, 64]"),
                                   "spec.matrix.params.BATCH_SIZE[0]", 10, "expected a string"),
    "sweep too many values": (edit(SWEEP, '["32", "64", "128"]',
                                   "[" + ", ".join(f'"{i}"' for i in range(65)) + "]"),
                              "spec.matrix.params.BATCH_SIZE", 10, "at most 64"),
    "sweep too many params": (edit(SWEEP, '      BATCH_SIZE: ["32", "64", "128"]\n',
                                   "".join(f'      P{i}: ["1"]\n' for i in range(17))),
                              "spec.matrix.params", 9, "at most 16"),
    "sweep repetitions": (edit(SWEEP, "  matrix:", "  repetitions: 65\n  matrix:"),
                          "spec.repetitions", 7, "at most 64"),
    "sweep cell count": (edit(SWEEP, "  matrix:", "  repetitions: 50\n  matrix:"),
                         "spec.matrix", 8, "300 cells"),
    "sweep regions within placement": (
        edit(SWEEP, "    gpu: [L4, A10]\n", "    gpu: [L4, A10]\n    regions: [us, ap]\n")
        + "      placement:\n        regions: [us, eu]\n",
        "spec.matrix.regions[1]", 9, "placement.regions"),
    "sweep cell names": (edit(SWEEP, "name: batch-size", "name: " + "b" * 62),
                         "metadata.name", 4, "shorten"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule(case: str) -> None:
    manifest, path, line, words = CASES[case]
    problems = problems_of(manifest)
    hits = [p for p in problems if p.path == path]
    assert hits, f"no problem at {path}; got {[str(p) for p in problems]}"
    assert hits[0].line == line, str(hits[0])
    assert words in hits[0].message, str(hits[0])
    assert hits[0].file == "m0.yaml"


def test_pipeline_and_stage_names_may_make_62_characters_together() -> None:
    """The seeds: "The pipeline name plus the stage name can be at most 62 characters"; the
    '-' that joins them into the stage Job's name is not counted."""
    pipeline = edit(PIPELINE, "name: train-eval", "name: " + "p" * 31)
    assert problems_of(edit(pipeline, "- name: train", "- name: " + "t" * 31)) == []
    [problem] = problems_of(edit(pipeline, "- name: train", "- name: " + "t" * 32))
    assert problem.path == "spec.stages[1].name" and "63 characters" in problem.message


def test_a_stage_cap_below_the_pipeline_cap_is_accepted() -> None:
    assert problems_of(edit(PIPELINE, "      template: {}",
                            '      template: {maxCostUSD: "0.49"}')) == []


def test_a_default_cap_is_reported_once_not_per_stage() -> None:
    doc = edit(PIPELINE, "  defaults:\n", '  defaults:\n    maxCostUSD: "0.60"\n')
    problems = problems_of(doc)
    assert [(p.path, p.line) for p in problems] == [("spec.defaults.maxCostUSD", 8)], problems
    assert "exceeds" in problems[0].message


ENV_LIST = """\
  env:
    - name: LOG_LEVEL
      value: debug
    - name: NODUS_PARAM_X
      value: "1"
    - name: EMPTY
"""


def indent(text: str, by: int) -> str:
    return textwrap.indent(text, " " * by)


def test_env_in_the_kubernetes_list_form_is_accepted() -> None:
    assert problems_of(JOB + ENV_LIST) == []
    assert problems_of(SWEEP + indent(ENV_LIST, 4)) == []
    # Defaults in one form, a stage in the other.
    pipeline = edit(PIPELINE, "  defaults:\n", "  defaults:\n    env: {A: '1'}\n")
    pipeline = edit(pipeline, "      template: {}",
                    "      template:\n        env:\n          - {name: B, value: '2'}")
    assert problems_of(pipeline) == []


def test_reserved_env_names_in_pipeline_defaults_are_reported_once_at_their_line() -> None:
    doc = edit(PIPELINE, "  defaults:\n",
               "  defaults:\n    env:\n      - name: NODUS_X\n        value: x\n")
    problems = problems_of(doc)
    assert [(p.path, p.line) for p in problems] == [("spec.defaults.env[0].name", 9)], problems
    doc = edit(PIPELINE, "      template: {}", "      template:\n        env: {NODUS_Y: x}")
    problems = problems_of(doc)
    assert [(p.path, p.line) for p in problems] == [
        ("spec.stages[1].template.env.NODUS_Y", 23)], problems


@pytest.mark.parametrize("env, path", [
    ("env: {NODUS_JOB: x}\n", "spec.template.spec.env.NODUS_JOB"),
    ("env:\n  - {name: NODUS_JOB, value: x}\n", "spec.template.spec.env[0].name"),
])
def test_reserved_env_names_in_a_sweep_template(env: str, path: str) -> None:
    [problem] = problems_of(SWEEP + indent(env, 6))
    assert "reserved" in problem.message, problem
    assert (problem.path, problem.line) == (path, 15 + env.count("\n") - 1), problem


def test_text_line_matches_the_documented_shape() -> None:
    problem = problems_of(edit(JOB, "timeout: 10m", "timeout: 10x"), names=("jobs/train.yaml",))
    assert [str(p) for p in problem] == [
        'jobs/train.yaml:8: Job/train: spec.timeout: "10x" is not a duration (use 90s, 10m, 2h)'
    ]


def test_same_kind_and_name_twice_names_both_files() -> None:
    problems = problems_of(JOB, JOB, names=("a.yaml", "b.yaml"))
    assert len(problems) == 1
    assert "a.yaml:1" in problems[0].message and "b.yaml:1" in problems[0].message
    # Same name, other kind: not a duplicate.
    assert problems_of(JOB, edit(SWEEP, "name: batch-size", "name: train")) == []


def test_every_problem_in_one_run() -> None:
    bad = edit(edit(JOB, "timeout: 10m", "timeout: 10x"), '"0.25"', '"0"') + "  extra: 1\n"
    paths = {p.path for p in problems_of(bad, PIPELINE.replace("output: shards", "output: x"))}
    assert {"spec.timeout", "spec.maxCostUSD", "spec.extra",
            "spec.stages[1].inputs[0].output"} <= paths


@pytest.mark.parametrize("text, message", [
    ("a: !!python/object:os.system x\n", "tag"),
    ("!Ref x\n", "tag"),
    ("a: 1\na: 2\n", "duplicate key"),
    ("a: [1\n", "invalid YAML"),
    ("- just\n- a list\n", "is a list"),
    ("plain text\n", "is a string"),
])
def test_files_that_are_not_manifests(text: str, message: str) -> None:
    problems = problems_of(text)
    assert len(problems) == 1 and message in problems[0].message, problems


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    problems = problems_of("\n".join(lines) + "\n")
    assert len(problems) == 1 and "alias bomb" in problems[0].message


def test_oversized_file() -> None:
    problems = problems_of("# " + "x" * (1024 * 1024) + "\n")
    assert "limited to" in problems[0].message


def test_timestamps_stay_strings() -> None:
    assert problems_of(JOB + "  completeByTime: 2026-12-01T18:00:00Z\n") == []


def test_yaml_anchors_and_merge_keys_still_work() -> None:
    doc = edit(JOB, "spec:\n", "x-common: &common\n  timeout: 10m\nspec:\n  <<: *common\n")
    problems = problems_of(doc)
    assert [p.path for p in problems] == ["x-common"]  # only the unknown top-level field


@pytest.mark.parametrize("spec, annotations, floor", [
    ({}, {"nodus.dev/model": "meta-llama/Llama-3.1-8B"}, "24Gi"),
    ({}, {"nodus.dev/model": "mistral-7b"}, "24Gi"),
    ({}, {"nodus.dev/model": "Qwen-14B"}, "32Gi"),
    ({}, {"nodus.dev/model": "codellama-34b"}, "48Gi"),
    ({}, {"nodus.dev/model": "falcon-40B"}, "48Gi"),
    ({}, {"nodus.dev/model": "llama-70B"}, "80Gi"),
    ({}, {"nodus.dev/model": "Qwen2-72B"}, "80Gi"),
    ({}, {"nodus.dev/dataset-bytes": str(2 * 2**40)}, "80Gi"),
    ({}, {"nodus.dev/dataset-bytes": str(2**40)}, None),  # over 1 TiB, not at it
    ({}, {}, None),
    ({"resources": {"gpu": "L4"}}, {"nodus.dev/model": "llama-70B"}, None),
    ({"resources": {"gpu": {"type": "L4"}}}, {"nodus.dev/model": "llama-70B"}, None),
    ({"resources": {"gpu": {"minMemory": "40Gi"}}}, {"nodus.dev/model": "llama-70B"}, "40Gi"),
    ({"resources": {"gpu": {"count": 2}}}, {"nodus.dev/model": "llama-13B"}, "32Gi"),
])
def test_effective_min_memory(spec: dict, annotations: dict, floor: str | None) -> None:
    assert effective_min_memory(spec, annotations) == floor
