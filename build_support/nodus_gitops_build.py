"""setuptools' build backend, run with its build/ and *.egg-info in a temporary
directory: `pip install .` leaves nothing in the source tree (and no stale build/lib
from an earlier build can reach a wheel). Editable installs are setuptools' own."""
from __future__ import annotations

import contextlib
import os
import tempfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403


@contextlib.contextmanager
def _outside_the_tree():
    with tempfile.TemporaryDirectory(prefix="nodus-gitops-build-") as tmp:
        cfg = os.path.join(tmp, "build.cfg")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write(f"[build]\nbuild_base = {os.path.join(tmp, 'build')}\n"
                    f"[egg_info]\negg_base = {tmp}\n")
        before = os.environ.get("DIST_EXTRA_CONFIG")
        os.environ["DIST_EXTRA_CONFIG"] = cfg
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = before


def _wrap(hook):
    def run(*args, **kwargs):
        with _outside_the_tree():
            return hook(*args, **kwargs)
    run.__name__ = hook.__name__
    return run


get_requires_for_build_wheel = _wrap(_setuptools.get_requires_for_build_wheel)
prepare_metadata_for_build_wheel = _wrap(_setuptools.prepare_metadata_for_build_wheel)
build_wheel = _wrap(_setuptools.build_wheel)
get_requires_for_build_sdist = _wrap(_setuptools.get_requires_for_build_sdist)
build_sdist = _wrap(_setuptools.build_sdist)
get_requires_for_build_editable = _wrap(_setuptools.get_requires_for_build_editable)
prepare_metadata_for_build_editable = _wrap(_setuptools.prepare_metadata_for_build_editable)
build_editable = _wrap(_setuptools.build_editable)
