"""JSON Schemas (draft 2020-12) for Nodus Job, Pipeline and Sweep, shipped as package data."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

KIND_FILES = {
    "Job": "job.schema.json",
    "Pipeline": "pipeline.schema.json",
    "Sweep": "sweep.schema.json",
}
SHARED_FILE = "defs.schema.json"


@cache
def load(filename: str) -> dict:
    """One schema document by file name, parsed once per process."""
    return json.loads(resources.files(__name__).joinpath(filename).read_text(encoding="utf-8"))


def all_documents() -> list[dict]:
    """Every schema this package ships, the shared definitions included."""
    return [load(SHARED_FILE), *(load(f) for f in KIND_FILES.values())]
