"""What each check says: the sync, plan and run checks of a commit, composed from a
sync's report, a preview's plan, or the resources a commit started.

A summary is Markdown that the host renders under the reconciler's name: what comes from
the manifests (names, file names, fields, messages quoting values, the backend's reasons)
goes in through `floor.markdown_text`, as code spans or escaped text, never as markup."""

from __future__ import annotations

from collections.abc import Iterable

from nodus_gitops.checks import plan_markdown
from nodus_gitops.checks.github import MAX_OUTPUT_TEXT
from nodus_gitops.checks.model import Annotation, CheckRun, CheckState, context_name
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.markdown_text import code, inline
from nodus_gitops.floor.masking import Masker
from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.results import ActionType, SyncResult, counts_text
from nodus_gitops.plan import Plan
from nodus_gitops.state.records import InventoryRecord

MAX_LINES = 60  # of actions or problems in a summary; the rest is counted


def _annotations(problems: Iterable[Problem]) -> tuple[Annotation, ...]:
    masker = Masker()
    return tuple(Annotation(p.file, max(p.line, 1), masker.text(
        f"{p.kind}/{p.name}: {p.path}: {p.message}" if p.path else p.message))
        for p in problems)


def _problem_line(p: Problem, masker: Masker) -> str:
    """A problem's line; its message may quote a manifest's value, a secret's too."""
    where = f"- {code(f'{p.file}:{p.line}')}"
    message = inline(masker.text(p.message))
    if p.path:
        return f"{where} {code(f'{p.kind}/{p.name}')}: {inline(p.path, then=':')}: {message}"
    return f"{where} {message}"


def _problem_lines(problems: list[Problem]) -> list[str]:
    masker = Masker()
    lines = [_problem_line(p, masker) for p in problems[:MAX_LINES]]
    if len(problems) > MAX_LINES:
        lines.append(f"- ... and {len(problems) - MAX_LINES} more")
    return lines


def _action_lines(plan: Plan) -> list[str]:
    shown = [a for a in plan.actions if a.action != ActionType.NOOP or a.reason]
    lines = [f"- **{a.action.value}** {code(a.key.short)} ({code(a.file)})"
             + (f": {inline(a.reason)}" if a.reason else "") for a in shown[:MAX_LINES]]
    if len(shown) > MAX_LINES:
        lines.append(f"- ... and {len(shown) - MAX_LINES} more")
    return lines


def pending(binding_id: str, repo: str, commit: str, instance: str, kind: str,
            title: str) -> CheckRun:
    return CheckRun(binding_id, repo, commit, context_name(instance, kind), CheckState.PENDING,
                    title, title)


def sync_check(binding_id: str, repo: str, commit: str, instance: str, result: str,
               message: str, problems: list[Problem], plan: Plan | None,
               summary: dict[str, int]) -> CheckRun:
    """`nodus/<instance>/sync`: what applying the commit did."""
    context = context_name(instance, "sync")
    result = SyncResult(result)
    if result == SyncResult.INVALID:
        body = [f"{len(problems)} problems; nothing from this commit was applied.", "",
                *_problem_lines(problems)]
        return CheckRun(binding_id, repo, commit, context, CheckState.FAILURE,
                        f"{len(problems)} invalid manifest problems", "\n".join(body),
                        _annotations(problems))
    if result == SyncResult.ERROR or not summary:
        # Nothing was applied, or not as planned: never green, whatever the plan said.
        # The message may quote a manifest, or a backend's answer about one.
        return CheckRun(binding_id, repo, commit, context, CheckState.ERROR, "sync failed",
                        inline(Masker().text(message)) if message
                        else f"the sync ended as {result.value} before applying")
    lines = [f"Summary: {counts_text(summary)}", ""]
    if plan is not None:
        lines += _action_lines(plan)
    ok = result.applied
    title = counts_text(summary) if ok else f"{result.value}: {counts_text(summary)}"
    return CheckRun(binding_id, repo, commit, context,
                    CheckState.SUCCESS if ok else CheckState.FAILURE, title, "\n".join(lines))


def plan_check(review: PlanReview) -> CheckRun:
    """`nodus/<instance>/plan`: what merging would do, from the same pure plan; its
    summary is the plan comment's text (without links: a check shows on every host)."""
    context = context_name(review.instance, "plan")
    summary = plan_markdown.render(review, plan_markdown.Target(
        "the check summary", MAX_OUTPUT_TEXT))
    where = (review.binding_id, review.repo_url, review.commit, context)
    if review.problems or review.plan is None:
        return CheckRun(*where, CheckState.FAILURE,
                        f"{len(review.problems)} invalid manifest problems", summary,
                        _annotations(review.problems))
    blocked = review.plan.blocked
    state = CheckState.FAILURE if blocked else CheckState.SUCCESS
    title = f"{len(blocked)} blocked" if blocked else counts_text(review.plan.summary())
    return CheckRun(*where, state, title, summary)


def run_check(binding_id: str, repo: str, commit: str, instance: str,
              records: list[InventoryRecord]) -> CheckRun:
    """`nodus/<instance>/run`: the resources the commit started, once all are finished."""
    context = context_name(instance, "run")
    failed = [r for r in records if r.phase != "Succeeded"]
    total = sum(float(r.cost_usd or 0) for r in records)
    lines = [f"{len(records) - len(failed)} of {len(records)} succeeded; cost ${total:.2f}", ""]
    masker = Masker()  # a backend's fix may quote a URL with its password
    for r in records:
        line = f"- {code(r.key.short)}: {inline(r.phase)}"
        if r.reason:
            fix = f": {inline(masker.text(r.fix))}" if r.fix else ""
            line += f" ({inline(r.reason, then=fix[:1])}{fix})"
        best = (r.status or {}).get("best") if r.key.kind == "Sweep" else None
        if best:
            line += f"; best by cost: cell {inline(best.get('byCost'))}, by throughput: " \
                    f"cell {inline(best.get('byThroughput', '-'))}"
        lines.append(line)
    state = CheckState.FAILURE if failed else CheckState.SUCCESS
    title = (f"{len(failed)} failed: " + ", ".join(r.key.short for r in failed[:5])) if failed \
        else f"{len(records)} succeeded, ${total:.2f}"
    return CheckRun(binding_id, repo, commit, context, state, title, "\n".join(lines))
