"""What slurmrestd cannot do, done with `scontrol` on the submit host: suspend and resume
running jobs, hold and release pending ones, change a time limit.

`scontrol suspend` needs root, SlurmUser or an operator: without one of those (or without
`scontrol` at all) the backend cannot suspend, and says so in `capabilities`.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from nodus_gitops.floor.errors import PermanentError, TransientError

_BENIGN = ("Job is pending execution", "already suspended", "not suspended",
           "Job is not suspended", "is not pending", "already completing or completed",
           "Invalid job id specified", "Job/step already completing")


class Scontrol:
    def __init__(self, program: str | None, slurm_conf: str | None = None,
                 timeout: float = 20.0) -> None:
        self.program = shutil.which(program) if program else None
        self.slurm_conf = slurm_conf
        self.timeout = timeout

    @property
    def available(self) -> bool:
        return self.program is not None

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SLURM_JWT", None)  # scontrol on the submit host authenticates with munge
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def run(self, *args: str) -> str:
        """Run `scontrol ARGS`; messages that only say there was nothing to do are fine."""
        if self.program is None:
            raise PermanentError("this slurm backend cannot suspend or resume: scontrol is not "
                                 "installed on the reconciler's host (set the provider's "
                                 "scontrol to its path)")
        try:
            proc = subprocess.run([self.program, *args], capture_output=True, text=True,
                                  timeout=self.timeout, env=self._env())
        except subprocess.TimeoutExpired:
            raise TransientError(f"scontrol {args[0]} timed out", delay=5) from None
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0:
            return out
        lines = [ln for ln in out.splitlines() if ln.strip()]
        if lines and all(any(b in ln for b in _BENIGN) or ln.endswith("No error")
                         for ln in lines):
            return out
        if "Access/permission denied" in out or "Invalid user" in out:
            raise PermanentError(f"scontrol {args[0]} was refused ({out}): suspend needs root, "
                                 "SlurmUser or a Slurm operator on the submit host")
        if "Unable to contact slurm controller" in out or "Socket timed out" in out:
            raise TransientError(f"scontrol {args[0]}: {out}", delay=5)
        raise PermanentError(f"scontrol {' '.join(args)} failed: {out}")

    def suspend(self, targets: list[str]) -> None:
        if targets:
            self.run("suspend", ",".join(targets))

    def resume(self, targets: list[str]) -> None:
        if targets:
            self.run("resume", ",".join(targets))

    def hold(self, job_ids: list[int]) -> None:
        if job_ids:
            self.run("hold", ",".join(map(str, job_ids)))

    def release(self, job_ids: list[int]) -> None:
        if job_ids:
            self.run("release", ",".join(map(str, job_ids)))

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        self.run("update", f"JobId={job_id}", f"TimeLimit={minutes}")
