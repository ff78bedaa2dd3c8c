"""A manifest file's own text as the dashboard shows it: its `|` blocks and comments as
written, numbered with anchors, and every value the dashboard masks hidden in place with
the line numbers kept, whether the file parses or not."""

from __future__ import annotations

import re

from nodus_gitops.web.redact import MASK
from nodus_gitops.web.source_view import listing, masked_file

PIPELINE = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: train-eval
spec:
  # One cap for the whole run.
  maxCostUSD: "0.50"
  stages:
    - name: train
      template:
        env:
          HF_TOKEN: hf_supersecret
          LOG_LEVEL: debug
          DB_PASSWORD: |
            hunter2
            more
        command:
          - python
          - -c
          - |
            import os
            print("TOKEN", os.environ["HF_TOKEN"])
---
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: solo
spec:
  env:
    - name: API_KEY
      value: "sk-live-123"
    - name: MODE
      value: fast
  command: [python, run.py]
"""


def lines(html: str) -> list[str]:
    """The text of each numbered line, as a reader sees it."""
    found = re.findall(r'<span id="L(\d+)" class="line[^"]*">.*?<span class="code">(.*?)'
                       r"</span>", html)
    assert [int(n) for n, _ in found] == list(range(1, len(found) + 1))
    return [text for _, text in found]


def test_the_file_shows_as_written_with_secrets_masked_in_place() -> None:
    source = masked_file("ml", "0" * 40, "jobs/pipeline.yaml", PIPELINE)
    assert source.parse_error is None
    assert source.masked == 5  # lines: two entries, a block's three, a list entry's value
    shown = source.text.split("\n")
    original = PIPELINE.split("\n")
    assert len(shown) == len(original)  # the lines keep their numbers
    for secret in ("hf_supersecret", "hunter2", "more", "sk-live-123"):
        assert secret not in source.text
    assert shown[11] == f"          HF_TOKEN: {MASK}"
    assert shown[13] == f"          DB_PASSWORD: {MASK}"
    assert shown[14] == shown[15] == ""  # the masked block's other lines, blank
    assert shown[30] == f"      value: {MASK}"
    # Everything else is the file's own text: comments, quotes, `|` blocks, the script.
    for i, line in enumerate(original):
        if i not in (11, 13, 14, 15, 30):
            assert shown[i] == line, i
    assert '            print("TOKEN", os.environ["HF_TOKEN"])' in shown


def test_each_document_knows_its_lines() -> None:
    source = masked_file("ml", "0" * 40, "jobs/pipeline.yaml", PIPELINE)
    assert source.lines_of("Pipeline", "train-eval") == (1, 22)
    assert source.lines_of("Job", "solo") == (24, 34)
    assert source.lines_of("Job", "train-eval") is None


def test_token_shapes_are_hidden_in_scripts_and_comments_and_nothing_else() -> None:
    text = ("kind: Job\n# deploy key: ghp_abcdefghijklmnopqrstuvwxyz0123\nspec:\n  command:\n"
            "    - bash\n    - -c\n    - |\n"
            '      curl -H "Authorization: Bearer abcdefghijkl0123" https://x\n'
            "      echo done\n")
    source = masked_file("ml", "0" * 40, "jobs/x.yaml", text)
    shown = source.text.split("\n")
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123" not in source.text
    assert "abcdefghijkl0123" not in source.text
    assert shown[7].startswith('      curl -H "Authorization: Bearer ') and shown[8] == (
        "      echo done")  # the script keeps its other words and lines
    assert source.masked == 2


def test_a_secret_the_config_names_is_hidden_wherever_it_is_written() -> None:
    text = "kind: Job\nspec:\n  command: [run, --sign=hook-secret-42]\n# hook-secret-42\n"
    source = masked_file("ml", "0" * 40, "jobs/x.yaml", text, secrets=["hook-secret-42"])
    assert "hook-secret-42" not in source.text
    assert source.text.split("\n")[2].startswith("  command: [run, --sign=")
    assert masked_file("ml", "0" * 40, "jobs/x.yaml", text).text == text


def test_a_file_that_does_not_parse_is_masked_line_by_line() -> None:
    broken = "kind: Job\nspec:\n  env:\n    GH_TOKEN: ghp_abc\n    - name: PASSWORD\n" \
             "      value: p4ss\n  bad: [unclosed\n"
    source = masked_file("ml", "0" * 40, "jobs/bad.yaml", broken)
    assert source.documents is None and "invalid YAML" in (source.parse_error or "")
    assert "ghp_abc" not in source.text and "p4ss" not in source.text
    assert source.text.split("\n")[3] == f"    GH_TOKEN: {MASK}"
    assert source.text.split("\n")[5] == f"      value: {MASK}"
    assert source.masked == 2


def test_the_listing_numbers_and_escapes_every_line() -> None:
    text = 'kind: Job\nmetadata:\n  name: "<script>alert(1)</script>"\n'
    source = masked_file("ml", "0" * 40, "jobs/x.yaml", text)
    html = listing(source, own=(1, 2))
    assert "<script>" not in html
    assert lines(html) == ["kind: Job", "metadata:",
                           "  name: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;"]
    assert '<a href="#L3" class="ln" aria-hidden="true">3</a>' in html
    assert html.count('class="line own"') == 2
