"""Settings writes — the shared terms: what a write may name, the refusal, an edit, the answer (seed 003, "loop_set",
"loop_widen", "loop_join").

``loop_join``, ``loop_set`` and ``loop_widen`` are round-trip edits of
MANIFEST.yaml and entity frontmatter that keep every untouched line. The
package, by topic: ``yaml_edits`` (the round trip), ``oversight`` (what a
write reaches and which widenings it makes), ``lock`` (one writer across
processes), ``write`` (stage, validate, push, sync, record), ``writes`` (the
three verbs), ``widen_card`` (an agent's widening waits on a person),
``reads`` (for the pages).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grading.models import Entity
from singularity.brain import defaults as D
from singularity.brain.loader import MANIFEST_PATH, BrainSnapshot, EntityDefinition

log = logging.getLogger(__name__)


#: The hitl producer of widen cards.
PRODUCER = "loop-settings"
APPROVE, DECLINE = "approve", "decline"
OP_JOIN, OP_SET, OP_WIDEN = "loop_join", "loop_set", "loop_widen"
SET, REMOVE = "set", "remove"
INVALID, NOT_FOUND, PRECONDITION, REFUSED, CONFLICT = "invalid", "not_found", "precondition", "refused", "conflict"
#: An agent with too many asks waiting on people (``evolution.steering.asks``): the next one is refused.
TOO_MANY = "too_many_pending"


#: How many times a write is made again on a default branch that moved under it (the file itself unchanged).
ATTEMPTS = 3


#: How long a write waits on the lock before answering conflict (settings.LOOP_SETTINGS_LOCK_SECS overrides).
LOCK_SECS = 30.0


#: The Postgres advisory lock key of loop-settings writes ("loopsett" as 8 bytes).
ADVISORY_KEY = int.from_bytes(b"loopsett", "big") & 0x7FFFFFFFFFFFFFFF


#: How long a widen card waits when the entity says nothing (loop.reviewDeadlineHours).
CARD_HOURS = 72


#: The most of a diff a widen card's text carries (Telegram messages are short).
CARD_DIFF_CHARS = 3000


KEY = re.compile(r"^(loop|evaluation)(\.[A-Za-z0-9_-]+)+$")


#: Under each block: the sub-blocks replaced wholesale by the nearest tier that writes them.
WHOLESALE = {"loop": D.LOOP_WHOLESALE, "evaluation": D.EVALUATION_WHOLESALE}


#: Knobs whose values order from a person's oversight (0) to the machine's (higher): a rise widens.
RANKED = {
    "autonomy.decide": {"human": 0, "auto": 1},
    "autonomy.merge": {"human": 0, "auto": 1},
    "autonomy.onInconclusive": {"human": 0, "close": 1, "ship": 2},
    "autonomy.onUnmeasured": {"pause": 0, "continue": 1},
    "autonomy.requireCalibration": {True: 0, False: 1},
    "watch.onInconclusive": {"revert": 0, "keep": 1},
}


#: The knobs loop_set judges (the autonomy family, the change perimeter, the brain-wide switch).
JUDGED = (
    *(f"loop.{k}" for k in RANKED),
    "loop.autonomy.maxConsecutiveRegressions",
    "loop.editablePaths",
    "loop.protectedPaths",
    "loop.maxChangedLines",
)


class SettingsRefusal(Exception):
    """A loop-settings write refused; ``code`` is the API's, ``detail`` says what and where, ``widened`` lists
    the widenings when the refusal is loop_set's."""

    def __init__(self, code: str, detail: str, *, widened: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.widened = list(widened or [])


@dataclass(frozen=True)
class Edit:
    """One key of one document: ``key`` dotted from the document's root ("loop.autonomy.decide", "enabled")."""

    key: str
    op: str = SET
    value: Any = None

    def words(self) -> str:
        """The edit in a few words: "loop.autonomy.decide = auto" or "loop.threshold removed"."""
        if self.op == REMOVE:
            return f"{self.key} removed"
        return f"{self.key} = {json.dumps(self.value, ensure_ascii=False)}"


@dataclass
class Answer:
    """What a write answers: the files (each with its diff and the digest of the bytes validated), the
    widenings, the commit; ``pending`` with ``card_id`` when a person's approval is awaited."""

    files: list[dict[str, str]] = field(default_factory=list)
    widened: list[dict[str, Any]] = field(default_factory=list)
    #: The loosenings of spend, the check or the watch the write makes (``loosening``): an agent's wait on a card.
    loosened: list[dict[str, Any]] = field(default_factory=list)
    commit: str | None = None
    pending: bool = False
    card_id: str | None = None
    resumed: bool | None = None
    dry_run: bool = False
    subject: str = ""
    summary: str = ""
    #: On a dry run that changes an entity's file: its resolved terms with the write made (not in the API's answer).
    terms_after: dict[str, Any] | None = None

    @property
    def changed(self) -> bool:
        return bool(self.files)

    def as_json(self) -> dict[str, Any]:
        """The API's answer (camelCase)."""
        body: dict[str, Any] = {
            "ok": True,
            "changed": self.changed,
            "dryRun": self.dry_run,
            "files": self.files,
            "widened": self.widened,
            "loosened": self.loosened,
            "commit": self.commit,
            "pending": self.pending,
            "cardId": self.card_id,
        }
        if self.resumed is not None:
            body["resumed"] = self.resumed
        return body


@dataclass
class Tip:
    """The brain at the tip a write is planned on: the snapshot, the target's definition (None: the manifest)."""

    snapshot: BrainSnapshot
    definition: EntityDefinition | None
    path: str
    text: str

    @property
    def subject(self) -> str:
        return subject_of(self.definition)


Planner = Callable[[Tip], list[Edit]]


def subject_of(target: Entity | EntityDefinition | None) -> str:
    """What the action log names: "<kind>:<id>" for an entity, the manifest's path for the brain tier."""
    if target is None:
        return MANIFEST_PATH
    return f"{target.target_kind}:{target.slug}"


def target_named(target_kind: str | None, target_id: str | None) -> Entity | None:
    """The entity ``target_kind`` + ``target_id`` name; None when both are empty (the brain tier).

    Raises SettingsRefusal: ``invalid`` when only one half is given, ``not_found`` when they name nothing.
    """
    if not target_kind and not target_id:
        return None
    if not target_kind or not target_id:
        missing = "targetKind" if not target_kind else "targetId"
        raise SettingsRefusal(INVALID, f"{missing}: name both targetKind and targetId, or neither (the brain tier)")
    from grading.target_names import target_kind_named

    try:
        kind = target_kind_named(target_kind)  # an old name (workflow, pipeline, chat) reads as its kind (R5.21)
    except ValueError as exc:
        raise SettingsRefusal(INVALID, str(exc)) from None
    entity = Entity.objects.filter(target_kind=kind, slug=target_id).first()
    if entity is None:
        raise SettingsRefusal(NOT_FOUND, f"{kind}:{target_id} names no entity")
    return entity
