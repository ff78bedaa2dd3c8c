"""What the checks and the plan comment say is masked as the dashboard is: a pull
request's plan, a sync check's problems and error, a run check's fix can quote a
manifest's env value or a backend's URL with its password, and a check is read by many
more people than the manifest's authors."""

from __future__ import annotations

from nodus_gitops.checks import compose
from nodus_gitops.checks.plan_markdown import Target, render
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.masking import MASK
from nodus_gitops.floor.problems import Problem
from nodus_gitops.plan import Action, ActionType, Change, Plan
from nodus_gitops.state.records import InventoryRecord

SHA = "ce587453ced02b1526dfb4cb910479d431683101"
REPO = "https://github.com/octo-org/gpu-jobs.git"
WHERE = ("team-a", REPO, SHA, "ci")
# the attack review's five, each missed once by name or by looks
SECRETS = {"MYSQL_PWD": "S3cr3t!pw", "PW": "correcthorse", "ADMIN_PIN": "4455",
           "CONN": "Server=db;User Id=sa;Password=Passw0rd123;",
           "SLACK_HOOK": "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"}
HIDDEN = ("S3cr3t!pw", "correcthorse", "4455", "Passw0rd123",
          "T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX")


def _review(plan: Plan | None, problems: tuple[Problem, ...] = ()) -> PlanReview:
    return PlanReview("team-a", REPO, "ci", "training", "main", SHA, plan, problems)


def _plan() -> Plan:
    key = ResourceKey("Job", "training", "train")
    changes = tuple(Change(f"spec.env.{name}", None, value) for name, value in SECRETS.items())
    whole = Change("spec.env", {"KEEP": "visible"}, {"KEEP": "visible", **SECRETS})
    return Plan((Action(ActionType.REPLACE, key, "jobs/train.yaml", changes=changes),
                 Action(ActionType.PATCH, ResourceKey("Job", "training", "t2"),
                        "jobs/t2.yaml", changes=(whole,))))


def test_the_plan_comment_and_the_plan_check_mask_env_values() -> None:
    target = Target("GitHub", 65_536, None)
    for text in (render(_review(_plan()), target), compose.plan_check(_review(_plan())).summary):
        for secret in HIDDEN:
            assert secret not in text, (secret, text)
        assert MASK in text and "visible" in text  # the rest is shown as written


def test_problems_errors_and_fixes_are_masked() -> None:
    leak = "postgres://app:Sup3rS3cretPw@db.example:5432/x"
    problem = Problem("jobs/a.yaml", 3, "Job", "a", "spec.env.DB", f"bad value {leak}")
    texts = [
        compose.sync_check(*WHERE, "invalid", "", [problem], None, {}).summary,
        compose.sync_check(*WHERE, "error", f"backend said {leak}", [], None, {}).summary,
        compose.plan_check(_review(None, (problem,))).summary,
        render(_review(None, (problem,)), Target("GitHub", 65_536, None)),
        compose.run_check(*WHERE, [InventoryRecord(
            ResourceKey("Job", "training", "a"), "team-a", {}, "h", phase="Failed",
            reason="CreateFailed", fix=f"check {leak}")]).summary,
        *(a.message for a in compose.sync_check(*WHERE, "invalid", "", [problem], None,
                                                {}).annotations),
    ]
    for text in texts:
        assert "Sup3rS3cretPw" not in text, text
