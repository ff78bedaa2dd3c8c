"""Masking as a reader of a page meets it: environment values hidden by their names and by
their looks, token shapes and configured secrets hidden wherever they are written, and a
Job's own command shown as written when it holds no secret."""

from __future__ import annotations

import base64
import secrets as random_secrets
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from nodus_gitops.config import Binding, Settings, load_settings
from nodus_gitops.web.redact import (
    MASK,
    Masker,
    configured_secrets,
    high_entropy,
    looks_secret,
    mask,
    mask_text,
)

GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n"
       "RgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u\n-----END RSA PRIVATE KEY-----")


@pytest.mark.parametrize("value", [
    "Bearer sk-proj-abcdefghijklmnop1234", "Basic dXNlcjpodW50ZXIy", "bearer x", "Token abc",
    GITHUB, "gho_" + "x" * 36, "ghs_" + "y1" * 18, "github_pat_11ABCDEFG0123456789_abcdefXYZ",
    "glpat-abcdefghij0123456789", "xoxb-1234567890-abcdefghij", "AKIAIOSFODNN7EXAMPLE",
    "sk-abcdefghijklmnopqrstuv", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "rk_live_abcdefghij12",
    JWT, PEM, "postgres://app:hunter2@db.internal:5432/app",
    "Zk9pQ2xWd3RrN0pHbU1yUXBhYkx0Y3h5Rjd2ZWhHcUE",  # 43 characters, high entropy
])
def test_an_env_value_that_looks_secret_is_hidden_whatever_its_name(value: str) -> None:
    out = mask({"spec": {"env": {"AUTHORIZATION_HEADER": value, "OPAQUE": value},
                         "template": {"env": [{"name": "X", "value": value}]}}})
    assert out["spec"]["env"] == {"AUTHORIZATION_HEADER": MASK, "OPAQUE": MASK}
    assert out["spec"]["template"]["env"] == [{"name": "X", "value": MASK}]


def test_the_case_the_page_showed_auth_bearer() -> None:
    out = mask({"spec": {"env": {"AUTH": "Bearer sk-live-abc123", "LOG_LEVEL": "debug"}}})
    assert out["spec"]["env"] == {"AUTH": MASK, "LOG_LEVEL": "debug"}


@pytest.mark.parametrize("name", ["API_TOKEN", "client_secret", "DB_PASSWORD", "SMTP_PASSWD",
                                  "DB_PASS", "SSH_KEY", "AWS_CREDENTIALS", "AUTH", "COOKIE",
                                  "SESSION_ID", "PRIVATE_PEM", "JWT", "passphrase"])
def test_an_env_value_whose_name_looks_secret_is_hidden(name: str) -> None:
    assert looks_secret(name)
    assert mask({"env": {name: "plain"}}) == {"env": {name: MASK}}
    assert mask({"env": [{"name": name, "value": "plain"}]}) == {
        "env": [{"name": name, "value": MASK}]}


@pytest.mark.parametrize("value", [
    "debug", "32", "python:3.12-slim", "/data/models/llama-3-70b", "0123456789abcdef" * 2,
    "https://huggingface.co/meta-llama/Llama-3.1-8B", "basic", "Bearer", "sk-learn",
    "gpt2-medium-finetuned-wikitext103", "ResNet50ImageNetTrainingRun2024",
    "sha256:" + "0a1b2c3d" * 8,
])
def test_ordinary_values_are_shown(value: str) -> None:
    assert mask({"env": {"MODE": value}, "command": ["run", value]}) == {
        "env": {"MODE": value}, "command": ["run", value]}


def test_high_entropy_threshold() -> None:
    assert high_entropy("o42Oupt3V0dxxbx3G15FcfrqPJm293BP")  # 32 random characters
    assert not high_entropy("o42Oupt3V0dxxbx3G15FcfrqPJm293B")  # 31: too short to tell
    assert not high_entropy("060c7ac636a2e70b56bee36c13bddbf79b0b14f9")  # hex: <= 4 bits
    assert not high_entropy("a" * 40 + "1")


def test_a_jobs_command_keeps_its_words_and_loses_only_its_secrets() -> None:
    manifest = {"kind": "Job", "spec": {
        "command": ["curl", "-H", f"Authorization: Bearer {GITHUB}", "https://api.github.com"],
        "args": ["--password-file", "/run/pw", "--token-limit", "4096",
                 "--db", "postgres://app:hunter2@db/app"]}}
    out = mask(manifest)
    assert out["spec"]["command"] == ["curl", "-H", f"Authorization: Bearer {MASK}",
                                      "https://api.github.com"]
    assert out["spec"]["args"] == ["--password-file", "/run/pw", "--token-limit", "4096",
                                   "--db", f"postgres://app:{MASK}@db/app"]


def test_a_configured_secret_is_hidden_anywhere_even_inside_words() -> None:
    secret = "s3cr3t-Webhook-Value"
    status = {"message": f"signature {secret} refused", "outputs": {secret: {"size": 1}},
              "conditions": [{"message": f"x{secret}y"}], "env": {"MODE": secret}}
    out = mask(status, {secret})
    assert secret not in repr(out)
    assert out["message"] == f"signature {MASK} refused"
    assert out["conditions"][0]["message"] == f"x{MASK}y"
    assert list(out["outputs"]) == [MASK] and out["env"] == {"MODE": MASK}


def test_keys_that_hide_to_the_same_text_stay_apart() -> None:
    out = mask({"a-ghp_" + "1" * 30: 1, "a-ghp_" + "2" * 30: 2})
    assert out == {f"a-{MASK}": 1, f"a-{MASK} (2)": 2}


def test_a_pem_key_in_a_script_keeps_the_scripts_lines() -> None:
    script = f"set -e\ncat > key.pem <<EOF\n{PEM}\nEOF\nssh -i key.pem host\n"
    shown = Masker().text(script)
    assert shown.count("\n") == script.count("\n")
    assert "MIIEow" not in shown and "RgeLez" not in shown
    assert shown.splitlines()[2:6] == ["-----BEGIN RSA PRIVATE KEY-----", MASK, MASK,
                                       "-----END RSA PRIVATE KEY-----"]
    assert shown.splitlines()[-1] == "ssh -i key.pem host"


def test_a_sweeps_parameters_keep_their_count() -> None:
    out = mask({"matrix": {"params": {"API_KEY": ["a", "b"], "LR": ["0.1", GITHUB]}}})
    assert out == {"matrix": {"params": {"API_KEY": [MASK, MASK], "LR": ["0.1", MASK]}}}


# -- the file's own text ---------------------------------------------------------------

FILE = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: train   # the name
spec:
  command: [curl, -H, "Authorization: Bearer ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"]
  args:
    - --lr
    - "0.1"
  env:
    AUTH: "Bearer sk-live-abc123"  # from the vault
    LOG_LEVEL: debug
    OPAQUE: 'Zk9pQ2xWd3RrN0pHbU1yUXBhYkx0Y3h5Rjd2ZWhHcUE'
    DB_PASSWORD: |
      hunter2
      more
    WEBHOOK: whsec-configured-1234
  template:
    env:
    - value: p4ssw0rd-value
      name: API_KEY
    - name: MODE
      value: fast
    - {name: SESSION, value: abc}
  placement: {env: {HF_TOKEN: hf_x, GPU: L4}}
---
kind: Sweep
spec:
  matrix:
    params:
      SECRET_SEED: ["1", "2"]
      LR: [0.1, 0.2]
      KEY_LIST:
        - a
        - b
"""


def test_a_files_text_is_masked_in_place_line_for_line() -> None:
    shown = mask_text(FILE, {"whsec-configured-1234"})
    lines, original = shown.split("\n"), FILE.split("\n")
    assert len(lines) == len(original)
    for secret in ("ghp_A1b2", "sk-live-abc123", "Zk9pQ2", "hunter2", "more",
                   "whsec-configured-1234", "p4ssw0rd", "abc}", "hf_x", '"1"'):
        assert secret not in shown, secret
    expected_changes = {
        5: f'  command: [curl, -H, "Authorization: Bearer {MASK}"]',
        10: f"    AUTH: {MASK}  # from the vault",
        12: f"    OPAQUE: {MASK}",
        13: f"    DB_PASSWORD: {MASK}",
        14: f"      {MASK}",
        15: f"      {MASK}",
        16: f"    WEBHOOK: {MASK}",
        19: f"    - value: {MASK}",
        23: f"    - {{name: SESSION, value: {MASK}}}",
        24: f"  placement: {{env: {{HF_TOKEN: {MASK}, GPU: L4}}}}",
        30: f"      SECRET_SEED: {MASK}",
        33: f"        - {MASK}",
        34: f"        - {MASK}",
    }
    for n, line in enumerate(original):
        assert lines[n] == expected_changes.get(n, line), n


def test_masking_a_files_text_twice_changes_nothing_more() -> None:
    once = mask_text(FILE, {"whsec-configured-1234"})
    assert mask_text(once, {"whsec-configured-1234"}) == once


def test_every_line_break_kind_is_kept() -> None:
    text = "env:\r\n  TOKEN: a\r\n  X: ok\n# ghp_" + "a" * 30 + "\u2028tail\x85end"
    shown = mask_text(text)
    assert shown.splitlines() == ["env:", f"  TOKEN: {MASK}", "  X: ok", f"# {MASK}", "tail",
                                  "end"]
    assert len(shown.splitlines(keepends=True)) == len(text.splitlines(keepends=True))


# -- the secrets the config names ------------------------------------------------------

def _pem_key() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pkcs1 = key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()).decode()
    return pkcs1, pkcs1.splitlines()[5]


def test_configured_secrets_come_from_every_setting_that_names_one(tmp_path: Path) -> None:
    def value() -> str:
        return random_secrets.token_urlsafe(12)

    v = {name: value() for name in ("url", "file", "env", "pass", "gh", "gitea", "hook_file",
                                    "hook_env", "hook_literal", "dash_token", "dash_pw",
                                    "nodus", "slurm", "kube", "ambient")}
    (tmp_path / "creds").write_text(f"username=bot\ntoken={v['file']}\n")
    (tmp_path / "hook").write_text(v["hook_file"] + "\n")
    (tmp_path / "gitea").write_text(v["gitea"])
    (tmp_path / "kubeconfig").write_text(
        "users:\n- name: u\n  user:\n    token: " + v["kube"] + "\n")
    pem, pem_line = _pem_key()
    (tmp_path / "app.pem").write_text(pem)
    config = tmp_path / "config.yaml"
    config.write_text(f"""
repos:
  - {{id: a, url: "https://bot:{v['url']}@git.example/a.git"}}
  - {{id: b, url: "https://git.example/b.git", credentials: {{file: {tmp_path / 'creds'}}}}}
  - {{id: c, url: "https://git.example/c.git", credentials: {{env: GIT_C}}}}
  - {{id: d, url: "https://github.com/o/d.git", credentials: {{githubApp: true}}}}
githubApp: {{appId: 1, privateKeyFile: {tmp_path / 'app.pem'}}}
checks:
  github: {{tokenEnv: MY_GH}}
  gitea: {{tokenFile: {tmp_path / 'gitea'}}}
  webhooks:
    github: {{secretFile: {tmp_path / 'hook'}}}
    gitlab: {{secretEnv: HOOK_LAB}}
    gitea: {v['hook_literal']}
dashboard: {{token: {v['dash_token']}, basicAuth: {{user: ops, passwordEnv: DASH_PW}}}}
providers:
  cloud: {{type: nodus, apiKeyEnv: MY_NODUS, kubeconfig: {tmp_path / 'kubeconfig'}}}
  hpc: {{type: slurm}}
""")
    environ = {"GIT_C_TOKEN": v["env"], "GIT_C_SSH_PASSPHRASE": v["pass"], "MY_GH": v["gh"],
               "HOOK_LAB": v["hook_env"], "DASH_PW": v["dash_pw"], "MY_NODUS": v["nodus"],
               "SLURM_JWT": v["slurm"], "SOME_SERVICE_API_KEY": v["ambient"],
               "XDG_SESSION_CLASS": "user", "HOME": "/home/ops"}
    settings = load_settings(str(config), environ=environ)
    found = configured_secrets(settings, environ)
    for name, secret in v.items():
        assert secret in found, name
    assert pem_line in found  # a line of the App's key, as pasted without its header
    assert base64.b64encode(f"ops:{v['dash_pw']}".encode()).decode() in found
    assert base64.b64encode(f"bot:{v['file']}".encode()).decode() in found
    # Names are not secrets, and neither are the values of variables not named like one.
    assert not {"GIT_C", "MY_GH", "user", "/home/ops", "ops", "bot"} & found
    # What the page then shows of a manifest that carries them.
    manifest = {"spec": {"command": ["sh", "-c", f"echo {v['kube']} {v['hook_file']}"],
                         "env": {"MODE": v["dash_token"]}}}
    assert mask(manifest, found) == {"spec": {"command": ["sh", "-c", f"echo {MASK} {MASK}"],
                                              "env": {"MODE": MASK}}}


def test_settings_without_secrets_name_none() -> None:
    settings = Settings(bindings=(Binding("a", "https://git.example/a.git"),))
    assert configured_secrets(settings, {"HOME": "/root", "PATH": "/bin"}) == frozenset()


def test_a_missing_credentials_file_names_nothing_and_breaks_nothing(tmp_path: Path) -> None:
    settings = Settings(bindings=(Binding("a", "https://git.example/a.git",
                                          credentials_file=str(tmp_path / "gone")),),
                        checks={"webhooks": {"github": {"secretFile": str(tmp_path / "no")}}})
    assert configured_secrets(settings, {}) == frozenset()
