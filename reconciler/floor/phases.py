"""The platform's phases and reasons (seeds: Jobs, Pipelines and Sweeps pages)."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    QUEUED = "Queued"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    CANCELLING = "Cancelling"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    # The reconciler's own, not the platform's: Git asks for the resource and the backend
    # refused to create it (reason CreateFailed, with the backend's message). Planned as a
    # create again at the next commit, until it applies.
    CREATE_FAILED = "CreateFailed"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})


def is_terminal(phase: str | None) -> bool:
    return phase in TERMINAL_PHASES


class Reason(StrEnum):
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    OOM_KILLED = "OOMKilled"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    CAPACITY_UNAVAILABLE = "CapacityUnavailable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    INVALID_OUTPUT_PATH = "InvalidOutputPath"
    NO_PROGRESS = "NoProgress"
    STORAGE_UNAVAILABLE = "StorageUnavailable"
    RECOVERY_LIMIT_EXCEEDED = "RecoveryLimitExceeded"
    MAX_COST_REACHED = "MaxCostReached"
    INSUFFICIENT_CREDITS = "InsufficientCredits"
    BUDGET_EXCEEDED = "BudgetExceeded"
    SUSPEND_FAILED = "SuspendFailed"
    STAGE_FAILED = "StageFailed"
    CELLS_FAILED = "CellsFailed"
    # The local backend's own: a Job wrote past its disk cap; no sandbox can contain it.
    OUTPUT_LIMIT_EXCEEDED = "OutputLimitExceeded"
    SANDBOX_UNAVAILABLE = "SandboxUnavailable"
    # The reconciler's own: the backend refused a create (its message says why).
    CREATE_FAILED = "CreateFailed"


# What to change, per failure reason, as the seeds' table says it.
FIXES: dict[str, str] = {
    Reason.BACKOFF_LIMIT_EXCEEDED: "read the logs of the failed runs; fix the command or raise "
    "spec.backoffLimit",
    Reason.OOM_KILLED: "request more spec.resources.memory or a larger GPU",
    Reason.DEADLINE_EXCEEDED: "raise or remove spec.timeout",
    Reason.CAPACITY_UNAVAILABLE: "request a GPU that exists here or raise "
    "spec.placement.queueTimeout",
    Reason.IMAGE_PULL_FAILED: "use an image the backend knows (map it in the config's "
    "images)",
    Reason.INVALID_OUTPUT_PATH: "write every declared output under /nodus/outputs, or remove it "
    "from spec.outputs",
    Reason.NO_PROGRESS: "save checkpoints more often or raise recovery.minProgressDuration",
    Reason.STORAGE_UNAVAILABLE: "run the Job again later",
    Reason.RECOVERY_LIMIT_EXCEEDED: "raise spec.recovery.maxAttempts or use steadier capacity",
    Reason.MAX_COST_REACHED: "raise spec.maxCostUSD to continue",
    Reason.BUDGET_EXCEEDED: "raise the project's budgets.<project>.limitUSD in the config, or "
    "wait for its next period: the Job resumes on its own",
    Reason.STAGE_FAILED: "read the failed stages' reasons with describe job/<pipeline>-<stage>",
    Reason.CELLS_FAILED: "read the failed cells' reasons with describe job/<sweep>-<index>",
    Reason.OUTPUT_LIMIT_EXCEEDED: "write less under /nodus (outputs, state, work), or raise "
    "maxOutputBytes in the local backend's config",
    Reason.CREATE_FAILED: "read the backend's message; fix the manifest or the backend, then "
    "push a commit (every commit tries the create again)",
    Reason.SANDBOX_UNAVAILABLE: "install bubblewrap and allow it unprivileged user "
    "namespaces, or set sandbox: none in the local backend's config to run Jobs "
    "uncontained on a trusted machine",
}
