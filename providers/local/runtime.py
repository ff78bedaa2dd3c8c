"""The Python installations a contained run needs besides /usr: the supervisors'
interpreter (its virtualenv and the Python it was made from) and a mapped image's
virtualenv with its base Python. They are bound read-only at their own paths, so the
links inside a virtualenv keep working, and never when one holds the state directory
(`holding`): that would bind the database and every run directory into each run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nodus_gitops.providers.local import sandbox


def _outside_runtime(paths: list[str]) -> list[str]:
    """Existing directories not already in the runtime, none nested in another."""
    kept: list[str] = []
    for p in sorted({os.path.abspath(p) for p in paths if p and os.path.isdir(p)}):
        if sandbox.in_runtime(p) or any(p.startswith(k.rstrip("/") + "/") for k in kept):
            continue
        kept.append(p)
    return kept


def python_roots(python: str) -> list[str]:
    """The installations a run needs to execute `python`: its virtualenv and the
    Python it was made from, where they are not under /usr."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix]
    else:
        try:
            out = subprocess.run([python, "-c", "import sys; print(sys.prefix); "
                                  "print(sys.base_prefix)"], capture_output=True, text=True,
                                 timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        prefixes = out.split()
    return _outside_runtime(prefixes)


def venv_roots(bin_dir: str) -> list[str]:
    """A mapped image's environment (the parent of its bin directory) and the Python it
    was made from (pyvenv.cfg's `home`)."""
    env = Path(bin_dir).parent
    roots = [str(env)]
    try:
        for line in (env / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                roots.append(str(Path(value.strip()).parent))
    except OSError:
        pass
    return _outside_runtime(roots)


def holding(roots: list[str] | tuple[str, ...], path: str | Path) -> str | None:
    """The first of `roots` that is `path` or a directory above it, else None."""
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip("/") + "/"):
            return root
    return None
