"""A stand-in for the Nodus Python SDK inside local runs: just enough for programs that
report throughput with `nodus.log.unit(id, ms)` to run unmodified. The local backend
puts this directory on PYTHONPATH; it is never installed into site-packages."""

from nodus import log

__all__ = ["log"]
