"""The author of a round's change: the entity's proposer pipeline, or the engine's proposer agent.

``propose(cycle, round, brief)`` asks whoever ``loop.proposer.pipeline``
names (read live, with the round's other terms):

- a pipeline id — the file stem of a ``*.pipeline.py`` a pipeline scenario
  of the brain serves — is imported at that scenario's commit and called
  ``run(ctx, brief.data)`` as a loop-launched run of its own (an execution
  the loop launched: never graded, in no window); what it spends is its own;
- ``null`` — the proposer agent under ``loop.proposer.modelRef`` (else the
  proposer role's model, else the engine's): turns of chat completions with
  read-only tools (``evolution.investigate``: the brain at the base commit,
  the ro_* views, loop_history, a chat role's episodes) until it answers JSON,
  each turn priced exactly and counted against ``budget.maxUsdPerRun``, the
  kill switch and the holds read before every turn and every second of its
  model call (which one thrown cuts, unpaid); what it read is kept.

The answer is ``{summary, hypothesis, files: [{path, content}], citedLessons}``
with whole new file contents (``content`` null deletes), each path once and
plain brain-root-relative. Anything else fails the round (``ProposalFailed``,
naming what was wrong); a pipeline answering None means nothing to propose.
The agent declines with an empty ``files`` list and its reason in the summary.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from evolution.core import cycles
from evolution.loop.pipelines import pipeline_id, refusal_sentence, served_pipeline
from evolution.loop.steps import Brief, Settle
from evolution.models import Cycle, Round
from grading.models import Entity, Execution
from singularity.brain.git import GitError
from singularity.errors import SingularityError

log = logging.getLogger(__name__)

ROLE_PATH = "constitution/Agents/system/loop/role-proposer.md"
BUNDLED_ROLE = Path(__file__).resolve().parent.parent / "prompts" / "role-proposer.md"
ANSWER_KEYS = ("summary", "hypothesis", "files", "citedLessons")
GLOB_CHARS = set("*?[]")
_FENCED = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)


class ProposalFailed(SingularityError):
    """The proposer's answer is broken (or the proposer could not be asked); the message says what and where.

    ``cost_usd`` is what the attempt spent all the same (the agent's call was paid for).
    """

    exit_code = 5

    def __init__(self, message: str, *, author: str = "", cost_usd: Decimal = Decimal(0)) -> None:
        super().__init__(message)
        self.author = author
        self.cost_usd = cost_usd
        #: What the agent read before it failed (kept on the round).
        self.reads: list[dict[str, Any]] = []


@dataclass
class Proposal:
    """A change proposed for the round: whole new files, the lessons it stands on, who wrote it and what it cost."""

    summary: str
    hypothesis: str
    files: list[dict[str, Any]]
    cited_lessons: list[int] = field(default_factory=list)
    author: str = ""
    cost_usd: Decimal = Decimal(0)
    #: What the agent read before it answered (evolution.investigate): one entry a tool call.
    reads: list[dict[str, Any]] = field(default_factory=list)

    @property
    def declined(self) -> bool:
        """True for the agent's decline: no files, the reason in the summary."""
        return not self.files


# --- Reading an answer ----------------------------------------------------------------------


def path_problem(path: Any) -> str | None:
    """Return why ``path`` is not a plain brain-root-relative file path, or None when it is."""
    if not isinstance(path, str) or not path.strip():
        return "is not a file path"
    if path != path.strip():
        return "has spaces around it"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "is absolute; paths are relative to the brain's root"
    if "\\" in path or "\0" in path:
        return "holds a backslash or a NUL; paths use / between folders"
    if GLOB_CHARS & set(path):
        return "is a glob; name each file"
    parts = path.split("/")
    if ".." in parts:
        return 'climbs out with ".."'
    if any(part in ("", ".") for part in parts):
        return "has an empty or '.' segment; write the plain path"
    return None


def validate_answer(answer: Any, *, who: str, allow_decline: bool) -> tuple[str, str, list[dict[str, Any]], list[int]]:
    """Return (summary, hypothesis, files, cited lesson ids) of a proposer's answer; ProposalFailed naming the fault.

    ``allow_decline`` lets ``files`` be empty (the agent's decline); a pipeline
    must name at least one file (it declines by answering None).
    """
    if not isinstance(answer, dict):
        raise ProposalFailed(
            f"{who}: answered {type(answer).__name__}, not an object {{summary, hypothesis, files, citedLessons}}"
        )
    unknown = sorted(set(answer) - set(ANSWER_KEYS))
    if unknown:
        raise ProposalFailed(f"{who}: unknown key {unknown[0]!r}; an answer is {{{', '.join(ANSWER_KEYS)}}}")
    summary, hypothesis, files = answer.get("summary"), answer.get("hypothesis"), answer.get("files")
    if not isinstance(summary, str) or not summary.strip():
        raise ProposalFailed(f"{who}: summary: required text (the card's headline)")
    if not isinstance(hypothesis, str):
        raise ProposalFailed(f"{who}: hypothesis: required text (what the lesson records)")
    if not isinstance(files, list):
        raise ProposalFailed(f"{who}: files: expected a list of {{path, content}}, not {type(files).__name__}")
    if not files and not allow_decline:
        raise ProposalFailed(f"{who}: files: at least one {{path, content}} (answer None to propose nothing)")
    if files and not hypothesis.strip():
        raise ProposalFailed(f"{who}: hypothesis: required text (what the lesson records)")
    return summary.strip(), hypothesis.strip(), _files(files, who), _cited(answer.get("citedLessons"), who)


def _files(files: list[Any], who: str) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for index, item in enumerate(files):
        where = f"{who}: files[{index}]"
        if not isinstance(item, dict) or set(item) - {"path", "content"} or "path" not in item or "content" not in item:
            raise ProposalFailed(f"{where}: expected {{path, content}} (content null deletes the file)")
        path, content = item["path"], item["content"]
        problem = path_problem(path)
        if problem:
            raise ProposalFailed(f"{where}.path {path!r} {problem}")
        if path in seen:
            raise ProposalFailed(f"{where}.path {path!r} appears twice; each path once")
        if content is not None and not isinstance(content, str):
            raise ProposalFailed(f"{where}.content for {path}: the whole new text, or null to delete it")
        seen.add(path)
        out.append({"path": path, "content": content})
    return out


def _cited(value: Any, who: str) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ProposalFailed(f"{who}: citedLessons: expected a list of lesson ids (integers), not {value!r}")
    ids: list[int] = []
    for lesson_id in value:
        if lesson_id not in ids:
            ids.append(lesson_id)
    return ids


# --- The pipeline ------------------------------------------------------------------------------


def pipeline_deadline(until: datetime | None, now: datetime | None = None) -> float:
    """Return how many seconds a proposer pipeline may run: ``LOOP_PIPELINE_DEADLINE_SECS``, never past ``until``."""
    from django.utils import timezone

    limit = float(settings.LOOP_PIPELINE_DEADLINE_SECS)
    if until is not None:
        limit = min(limit, max((until - (now or timezone.now())).total_seconds(), 0.001))
    return limit


def _pipeline_answer(
    pipeline: Entity, brief: Brief, who: str, checkout: Any | None, until: datetime | None = None
) -> Any:
    """Run the pipeline once as a loop-launched run of its own and return what ``run`` answered.

    ``run`` answers within ``pipeline_deadline(until)`` or its run fails naming the deadline (the thread is
    abandoned; what it does after is nobody's answer).
    """
    from grading.executions import finish_execution, start_execution
    from grading.runners.context import PipelineContext, RunRecorder, _Resources
    from grading.runners.pipeline import default_checkout, error_summary, params_of
    from singularity.brain import deadline
    from singularity.brain.modules import BrainModuleError, load_at

    try:
        module = load_at(checkout or default_checkout(), pipeline.commit, pipeline.pipeline_path).module
    except (BrainModuleError, GitError) as exc:
        raise ProposalFailed(f"{who}: {exc}", author=who) from exc
    run = getattr(module, "run", None)
    if not callable(run):
        raise ProposalFailed(f"{who}: {pipeline.pipeline_path} has no module-level run(ctx, brief)", author=who)
    execution = start_execution(pipeline, input=brief.data, source=Execution.Source.LOOP, loop_launched=True)
    resources = _Resources()
    recorder = RunRecorder(execution, resources)
    ctx = PipelineContext(recorder, entity=pipeline.slug, params=params_of(pipeline))
    status, output, error = Execution.Status.SUCCEEDED, None, ""
    try:
        answer = deadline.call(
            run,
            ctx,
            copy.deepcopy(brief.data),
            path=pipeline.pipeline_path,
            name="run",
            seconds=pipeline_deadline(until),
        )
        output = _json_copy(answer)
    except deadline.BrainDeadline as exc:
        status, error = Execution.Status.FAILED, str(exc)
    except _NotJSON as exc:
        status, error = Execution.Status.FAILED, f"run() answered something that is not JSON: {exc}"
    except Exception as exc:  # noqa: BLE001 - the brain's code failing is the round failing, recorded on its run
        status, error = Execution.Status.FAILED, error_summary(exc)
    finally:
        resources.close()
    finish_execution(
        execution,
        status=status,
        output=output,
        error=error,
        cost_usd=recorder.cost,
        tool_failures=recorder.tool_failures,
        trace=recorder.trace,
    )
    if error:
        raise ProposalFailed(f"{who}: {error} (run {execution.pk})", author=who)
    return output


class _NotJSON(Exception):
    pass


def _json_copy(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise _NotJSON(str(exc)) from exc


def propose_by_pipeline(
    entity: Entity, brief: Brief, *, checkout: Any | None = None, until: datetime | None = None
) -> Proposal | None:
    """Ask the entity's proposer pipeline; None when it answers None. ProposalFailed for any other failure.

    The pipeline's spend is its own (on its run), never the loop's: the proposal costs 0 here.
    """
    pipeline = pipeline_id(entity)
    assert pipeline is not None
    who = f"pipeline:{pipeline}"
    served = served_pipeline(pipeline)
    if served is None:
        raise ProposalFailed(refusal_sentence(pipeline), author=who)
    answer = _pipeline_answer(served, brief, who, checkout, until)
    if answer is None:
        return None
    summary, hypothesis, files, cited = validate_answer(answer, who=who, allow_decline=False)
    return Proposal(summary, hypothesis, files, cited, author=who, cost_usd=Decimal(0))


# --- The agent -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposerRole:
    path: str
    body: str
    model: str
    #: The copy's ``capabilities:`` as written; None when it declares none (the engine's read-only grant).
    capabilities: tuple[str, ...] | None = None


def resolve_role(entity: Entity, *, checkout: Any | None = None) -> ProposerRole:
    """Return the proposer role: the brain's copy at the entity's commit (replacing the engine's whole), else the engine's."""
    from grading.judge import split_frontmatter

    data: bytes | None = None
    path = f"engine:{BUNDLED_ROLE.name}"
    if entity.commit:
        try:
            repo = checkout
            if repo is None:
                from grading.sync import current_checkout

                repo = current_checkout()
            data = repo.read_at(entity.commit, ROLE_PATH)
            path = ROLE_PATH
        except GitError:
            data = None
    if data is None:
        data = BUNDLED_ROLE.read_bytes()
    try:
        frontmatter, body = split_frontmatter(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ProposalFailed(f"proposer role {path}: does not read: {exc}") from exc
    model = frontmatter.get("model") if isinstance(frontmatter.get("model"), str) else ""
    declared = frontmatter.get("capabilities")
    capabilities = None
    if isinstance(declared, list | str):
        capabilities = tuple(str(c).strip() for c in ([declared] if isinstance(declared, str) else declared))
    return ProposerRole(path=path, body=body.strip(), model=model or "", capabilities=capabilities)


def model_for(entity: Entity, role: ProposerRole) -> str:
    """Return the proposer agent's model: ``loop.proposer.modelRef``, else the role's model, else the engine's."""
    proposer = ((entity.terms or {}).get("loop") or {}).get("proposer") or {}
    return str(proposer.get("modelRef") or role.model or settings.BRAMA_MODEL)


def parse_json(content: str | None, who: str, cost: Decimal) -> Any:
    """Return the agent's answer as JSON data; ProposalFailed (with what the call cost) when it is not JSON."""
    text = (content or "").strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text:
        raise ProposalFailed(f"{who}: answered nothing", author=who, cost_usd=cost)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProposalFailed(
            f"{who}: the answer is not JSON ({exc.msg} at line {exc.lineno})", author=who, cost_usd=cost
        ) from exc


#: How a round's investigation gets its tools: ``(cycle, round, checkout) -> Toolbox`` (evolution.investigate,
#: which sits above this package; ``evolution.hooks`` registers it). Empty: the agent answers without tools.
TOOLBOX: list[Callable[[Cycle, Round, Any], Any]] = []


def use_toolbox(factory: Callable[[Cycle, Round, Any], Any]) -> None:
    """Say how a round's toolbox is made (``evolution.investigate.toolbox.for_round``)."""
    TOOLBOX[:] = [factory]


class Stopped(SingularityError):
    """The kill switch or a hold stood when the next turn was due, or was thrown during a turn's model call: the
    investigation stopped, nothing more asked.

    ``cost_usd`` is what the turns before it spent; ``reads`` what they read; ``abandoned`` says which model call
    was cut in flight (unpaid), or is "".
    """

    exit_code = 5

    def __init__(self, reason: str, *, cost_usd: Decimal, reads: list[dict[str, Any]], abandoned: str = "") -> None:
        super().__init__(f"{reason} ({abandoned})" if abandoned else reason)
        self.cost_usd = cost_usd
        self.reads = reads
        self.abandoned = abandoned


def interrupted(rnd: Round) -> str | None:
    """Why the investigation of ``rnd`` must stop before its next turn (the switch off, a hold), or None (R7.22)."""
    from evolution.steering.supervision import hold_refusal

    entity = rnd.cycle.entity
    entity.refresh_from_db(fields=["loop_enabled", "terms"])
    if not entity.loop_enabled:
        return "the loop was switched off"
    return hold_refusal(entity)


def usd(amount: Decimal) -> str:
    """Money as people read it: cents when that is exact, else every digit it has."""
    cents = amount.quantize(Decimal("0.01"))
    return f"${cents}" if cents == amount else f"${format(amount.normalize(), 'f')}"


def over_budget(cycle: Cycle | None, spent_here: Decimal) -> str | None:
    """The sentence when the run's budget.maxUsdPerRun has nothing left for another turn, else None (R7.13)."""
    if cycle is None:
        return None
    ceiling = (cycles.loop_terms(cycle.entity).get("budget") or {}).get("maxUsdPerRun")
    if ceiling is None:
        return None
    ceiling = Decimal(str(ceiling))
    spent = (cycle.spent_usd or Decimal(0)) + spent_here
    if spent >= ceiling:
        return f"over budget: spent {usd(spent)} of {usd(ceiling)} (budget.maxUsdPerRun)"
    return None


def _turn_cost(completion: Any) -> Decimal:
    from singularity.money import debit_for

    return debit_for(
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
        elapsed_ns=completion.elapsed_ns,
        input_price_per_million=settings.BRAMA_INPUT_PRICE_USD_PER_MILLION,
        output_price_per_million=settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION,
        instance_usd_per_hour=settings.SINGULARITY_INSTANCE_USD_PER_HOUR,
    ).total


class _Interrupted(Exception):
    """The kill switch or a hold was thrown while a model call was in flight; the call was abandoned."""

    def __init__(self, reason: str, seconds: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seconds = seconds


def watched_call(client: Any, rnd: Round | None, **request: Any) -> Any:
    """``client.complete(**request)``, abandoned when the kill switch or a hold is thrown meanwhile (R7.22).

    The call runs in a thread of its own while this one reads the switch and the holds every
    ``LOOP_PROPOSER_POLL_SECS``; one thrown cuts the call's connection (``Gateway.abort``: the server sees the
    client go, the SDK retries nothing) and raises ``_Interrupted`` at once, the call unpaid. Without a round
    (nothing to read the switch of) it is the plain call.
    """
    import threading
    import time

    if rnd is None:
        return client.complete(**request)
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
        try:
            outcome["completion"] = client.complete(**request)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=call, name=f"proposer-call-{rnd.pk}", daemon=True).start()
    while not done.wait(float(settings.LOOP_PROPOSER_POLL_SECS)):
        reason = interrupted(rnd)
        if reason:
            abort = getattr(client, "abort", None)
            if callable(abort):
                abort()
            raise _Interrupted(reason, time.monotonic() - started)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["completion"]


#: The most characters of one tool answer handed to the model (the rest is cut and said so).
MAX_TOOL_ANSWER_CHARS = 100_000

#: Said to the model on its last turn, when it is asked to answer without tools.
ANSWER_NOW = "Your turns for reading are used up: answer now with the JSON object alone."


def propose_by_agent(
    entity: Entity,
    brief: Brief,
    *,
    gateway: Any = None,
    checkout: Any | None = None,
    cycle: Cycle | None = None,
    round: Round | None = None,
) -> Proposal:
    """Let the proposer agent investigate with its read-only tools, then return its proposal; ProposalFailed otherwise.

    Each turn is one completion, priced after it and counted against the run's budget (an API turn is not
    capped: one that overshoots the remainder is recorded whole, R7.14); before each turn the kill switch and
    the holds are read (``Stopped``) and the budget's remainder (nothing left: ProposalFailed "over budget");
    during a turn's model call the switch and the holds are read again every ``LOOP_PROPOSER_POLL_SECS``, and one
    thrown cuts the call in flight (``watched_call``: ``Stopped`` naming it, the call unpaid, R7.22).
    The last of ``LOOP_PROPOSER_MAX_TURNS`` turns is offered no tools. An empty ``files`` is the decline.
    """
    from singularity.gateway import GatewayError, get_gateway

    role = resolve_role(entity, checkout=checkout)
    model = model_for(entity, role)
    who = f"agent:{model}"
    toolbox = TOOLBOX[0](cycle, round, checkout) if TOOLBOX and cycle is not None and round is not None else None
    prompt = brief.prompt
    if toolbox is not None and role.capabilities is not None:
        toolbox.narrow(role.capabilities)  # a copy that drops db:read keeps its proposer to the files (R22.18)
    if toolbox is not None:
        section = toolbox.brief_section()
        brief.documents["tools.md"] = section
        prompt = prompt.rstrip("\n") + "\n\n" + section + "\n"
    messages: list[dict[str, Any]] = [{"role": "system", "content": role.body}, {"role": "user", "content": prompt}]
    spent = Decimal(0)
    reads: list[dict[str, Any]] = []
    turns = int(settings.LOOP_PROPOSER_MAX_TURNS)
    own = gateway is None
    client = gateway or get_gateway()

    def failed(message: str) -> ProposalFailed:
        error = ProposalFailed(message, author=who, cost_usd=spent)
        error.reads = reads
        return error

    try:
        for turn in range(1, turns + 1):
            if round is not None:
                reason = interrupted(round)
                if reason:
                    raise Stopped(reason, cost_usd=spent, reads=reads)
            over = over_budget(cycle, spent)
            if over:
                raise failed(f"{over}; the proposer stopped before turn {turn}")
            last = toolbox is None or turn == turns
            if last and reads:
                messages.append({"role": "user", "content": ANSWER_NOW})
            try:
                completion = watched_call(
                    client,
                    round,
                    model=model,
                    messages=messages,
                    tools=[] if last else toolbox.specs,
                    response_format={"type": "json_object"},
                )
            except _Interrupted as cut:
                log.info(
                    "loop: round %s: turn %s's model call abandoned after %.1f s: %s", round, turn, cut.seconds, cut
                )
                abandoned = f"turn {turn}'s model call was abandoned after {cut.seconds:.1f} s, unpaid"
                raise Stopped(cut.reason, cost_usd=spent, reads=reads, abandoned=abandoned) from None
            except GatewayError as exc:
                raise failed(f"{who}: the gateway failed: {exc}") from exc
            cost = _turn_cost(completion)
            spent += cost
            if not completion.tool_calls:
                break
            if last:
                raise failed(f"{who}: called tools on its last turn instead of answering ({turns} turns)")
            messages.append(completion.message)
            for call in completion.tool_calls:
                answer, arguments = toolbox.call(call.name, call.arguments)
                text = json.dumps(answer, default=str, ensure_ascii=False)
                if len(text) > MAX_TOOL_ANSWER_CHARS:
                    cut = f"the answer was {len(text)} characters; only the first {MAX_TOOL_ANSWER_CHARS} are shown"
                    text = json.dumps({"cut": cut, "partial": text[:MAX_TOOL_ANSWER_CHARS]}, ensure_ascii=False)
                reads.append(
                    {
                        "turn": turn,
                        "tool": call.name,
                        "arguments": arguments,
                        "chars": len(text),
                        "refused": str(answer.get("refused") or answer.get("error") or ""),
                        "turnCostUsd": str(cost),
                    }
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    finally:
        if toolbox is not None:
            toolbox.close()
        if own:
            client.close()
    try:
        answer = parse_json(completion.content, who, spent)
        summary, hypothesis, files, cited = validate_answer(answer, who=who, allow_decline=True)
    except ProposalFailed as exc:
        raise failed(str(exc)) from None
    return Proposal(summary, hypothesis, files, cited, author=who, cost_usd=spent, reads=reads)


# --- The entry point ------------------------------------------------------------------------------------


def propose(
    cycle: Cycle, round: Round, brief: Brief, *, gateway: Any = None, checkout: Any | None = None
) -> Proposal | None:
    """Return the round's proposal from whoever the entity names now; None when a pipeline has nothing to propose.

    Raises ProposalFailed naming what was wrong: a pipeline the brain no
    longer serves, a throw, a broken answer, a gateway failure.
    """
    entity = cycle.entity
    if pipeline_id(entity) is not None:
        proposal = propose_by_pipeline(entity, brief, checkout=checkout, until=round.review_deadline)
    else:
        proposal = propose_by_agent(entity, brief, gateway=gateway, checkout=checkout, cycle=cycle, round=round)
    log.info(
        "loop: cycle %s r%s: %s %s",
        cycle.pk,
        round.number,
        proposal.author if proposal else "the pipeline",
        f"proposed {len(proposal.files)} file(s)" if proposal else "had nothing to propose",
    )
    return proposal


# --- The round's analysis ------------------------------------------------------------------


def claim(round_id: int, now: datetime) -> Round | None:
    """Take round ``round_id`` for this worker's analysis; None when it is not waiting for one (or its cycle ended).

    The claim is a conditional UPDATE: one worker analyses a round, however often its task is delivered. It
    stamps the analysis's first heartbeat (``evolution.core.due.analysis_heartbeat`` renews it).
    """
    claimed = Round.objects.filter(pk=round_id, status=Round.Status.ANALYSING, brief={}).update(
        brief={"_claimed": now.isoformat()}, analysis_beat_at=now
    )
    if not claimed:
        return None
    rnd = Round.objects.select_related("cycle", "cycle__entity").get(pk=round_id)
    return None if rnd.cycle.status else rnd


def keep_reads(rnd: Round, error: Exception) -> None:
    """Write on a failed or stopped round what its agent read and spent before it stopped."""
    reads = getattr(error, "reads", None)
    cost = getattr(error, "cost_usd", None)
    if not reads and not cost:
        return
    Round.objects.filter(pk=rnd.pk).update(reads=reads or [], cost_usd=cost or Decimal(0))
    rnd.reads, rnd.cost_usd = reads or [], cost or Decimal(0)


def still_analysing(rnd: Round) -> bool:
    """Whether ``rnd`` is still this worker's analysis (the lost-analysis sweep did not fail it meanwhile)."""
    return Round.objects.filter(pk=rnd.pk, status=Round.Status.ANALYSING, cycle__status="").exists()


def budget_refusal(cycle: Cycle) -> str | None:
    """The sentence when the run's budget.maxUsdPerRun is spent (priced by subtraction), else None."""
    ceiling = (cycles.loop_terms(cycle.entity).get("budget") or {}).get("maxUsdPerRun")
    if ceiling is None:
        return None
    ceiling = Decimal(str(ceiling))
    if cycle.spent_usd >= ceiling:
        return f"budget: spent ${cycle.spent_usd:.2f} of ${ceiling:.2f} (budget.maxUsdPerRun)"
    return None


def switched_off(rnd: Round) -> Settle | None:
    """The kill switch: a call about the loop, not a verdict on the round — no failed round, no card, no lesson."""
    if rnd.cycle.entity.loop_enabled:
        return None
    rnd.status = Round.Status.SKIPPED
    rnd.save(update_fields=["status"])
    return Settle(Cycle.Status.SKIPPED, "the loop was switched off during the analysis", lesson=False)


def record(rnd: Round, proposal: Proposal | None, documents: dict[str, Any], now: datetime) -> Settle | None:
    """Write the proposer's answer on its round (proposed); Settle skipped when it had nothing to propose."""
    cycle = rnd.cycle
    rnd.brief = documents
    if proposal is None:
        rnd.status = Round.Status.SKIPPED
        rnd.rejection = Round.Rejection.PROPOSER
        rnd.decided_by = cycle.actor
        rnd.save(update_fields=["brief", "status", "rejection", "decided_by"])
        return Settle(Cycle.Status.SKIPPED, "the proposer had nothing to propose")
    cycles.add_spend(cycle, proposal.cost_usd)
    rnd.summary = proposal.summary
    rnd.hypothesis = proposal.hypothesis
    rnd.files = proposal.files
    rnd.cited_lessons = proposal.cited_lessons
    rnd.author = proposal.author
    rnd.cost_usd = proposal.cost_usd
    rnd.reads = proposal.reads
    rnd.status = Round.Status.PROPOSED
    rnd.proposed_at = now
    rnd.save()
    if cycle.proposed_at is None:
        Cycle.objects.filter(pk=cycle.pk).update(proposed_at=now)
        cycle.proposed_at = now
    return None
