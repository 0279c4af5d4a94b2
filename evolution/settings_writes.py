"""Loop-settings writes: loop_join, loop_set and loop_widen (seed 003 "Running the loop from an agent").

A write names a tier — an entity (its markdown frontmatter) or the brain
(``constitution/MANIFEST.yaml``) — and one dotted ``loop.*`` / ``evaluation.*``
key to set or remove. Every write, from the dashboard's editors or the API,
from any process, goes through ``_run``:

1. take the one loop-settings lock (a Postgres advisory lock, or a file lock
   under settings.VAR_DIR on SQLite — one machine), except for a dry run;
2. clone the forge's remote at the default branch's tip into a throwaway
   directory and load the brain there (``load_brain``: the loader itself);
3. edit the file with ruamel.yaml's round-trip loader, grafting the edit onto
   the original text so every untouched line keeps its bytes (comments,
   spacing, quoting, flow style);
4. commit it in the clone and load the brain again at that commit: every
   entity the write reaches (the entity, or every entity for a manifest
   write) must still load — else ``refused`` naming it and the loader's
   reason; judge oversight on RESOLVED values before and after (``widened``);
5. dry run: answer each touched file with its unified diff and the digest of
   the bytes validated (``base``), and write nothing;
6. push to the default branch. A tip that moved meanwhile is re-read: when the
   touched file's bytes changed, ``conflict`` (try again) and nothing is
   written; otherwise the write is made again on the new tip, validated afresh;
7. one ``ActionLog`` row (who, op, subject, summary, diff, commit); then the
   brain is synced so the rows read the new terms at once.

Settings writes are a person's own edits to the brain, so they commit
straight to the default branch (docs/decisions.md); the loop's own changes
never do.

``loop_set`` refuses a write that widens oversight (autonomy knobs, the
change perimeter, the brain-wide loop switch) and points at ``loop_widen``. A
person's ``loop_widen`` is the approval itself; an agent's opens a widen card
(producer ``loop-settings``) and the write is made when a person approves it.
Refusals raise ``SettingsRefusal`` with the API's code: ``invalid``,
``not_found``, ``precondition``, ``refused`` or ``conflict``.
"""

from __future__ import annotations

import copy
import difflib
import fcntl
import hashlib
import io
import json
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from evolution.models import ActionLog
from grading.models import Entity
from singularity.brain import defaults as D
from singularity.brain import frontmatter
from singularity.brain.git import Checkout, GitError, git
from singularity.brain.loader import MANIFEST_PATH, BrainSnapshot, EntityDefinition, load_brain

log = logging.getLogger(__name__)

#: The hitl producer of widen cards.
PRODUCER = "loop-settings"
APPROVE, DECLINE = "approve", "decline"
OP_JOIN, OP_SET, OP_WIDEN = "loop_join", "loop_set", "loop_widen"
SET, REMOVE = "set", "remove"
INVALID, NOT_FOUND, PRECONDITION, REFUSED, CONFLICT = "invalid", "not_found", "precondition", "refused", "conflict"

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
    commit: str | None = None
    pending: bool = False
    card_id: str | None = None
    resumed: bool | None = None
    dry_run: bool = False
    subject: str = ""
    summary: str = ""

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
    entity = Entity.objects.filter(target_kind=target_kind, slug=target_id).first()
    if entity is None:
        raise SettingsRefusal(NOT_FOUND, f"{target_kind}:{target_id} names no entity")
    return entity


# --- YAML, round trip ---------------------------------------------------------------


def _indents(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as the text writes them (2, 2, 0 when it cannot tell)."""
    mapping = min(
        (len(m.group(1)) for m in re.finditer(r"^( +)[^\s#\-][^\n]*:", text, re.MULTILINE)),
        default=2,
    )
    # A text that writes no sequence gets the indented style: "key:" then "  - item".
    sequence, offset = mapping + 2, mapping
    try:
        _, guessed, dash = load_yaml_guess_indent(text)
    except YAMLError:
        guessed, dash = None, None
    if guessed is not None and dash is not None:
        sequence, offset = int(guessed), int(dash)
    return mapping, max(sequence, offset + 2), offset


def _yaml_for(text: str) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.allow_duplicate_keys = False
    mapping, sequence, offset = _indents(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.Representer = _Representer
    return yaml


class _Representer(RoundTripRepresenter):
    """The round-trip representer writing null as ``null`` (not an empty value), so a set null reads as meant."""


_Representer.add_representer(
    type(None), lambda representer, _: representer.represent_scalar("tag:yaml.org,2002:null", "null")
)


def _dump(yaml: YAML, doc: Any) -> str:
    if doc is None or (isinstance(doc, dict) and not doc):
        return ""
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _node(value: Any) -> Any:
    """A plain value as round-trip nodes (so a new block can carry the comments that follow it)."""
    if isinstance(value, dict):
        return CommentedMap((k, _node(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(_node(v) for v in value)
    return value


def _deepest_last(node: Any) -> tuple[Any, Any]:
    """The (container, key) of the last line a block collection writes (its trailing comment hangs there)."""
    key = list(node.keys())[-1] if isinstance(node, dict) else len(node) - 1
    child = node[key]
    if isinstance(child, (CommentedMap, CommentedSeq)) and len(child) and not child.fa.flow_style():
        return _deepest_last(child)
    return node, key


def _slot(container: Any) -> int:
    return 0 if isinstance(container, CommentedSeq) else 2


def _take_tail(container: Any, key: Any) -> str:
    """Detach and return the lines that follow the line of ``container[key]`` (blank lines, comments)."""
    items = container.ca.items.get(key)
    slot = _slot(container)
    token = items[slot] if items and len(items) > slot else None
    if not isinstance(token, CommentToken):
        return ""
    value = token.value
    cut = value.find("\n")
    if cut < 0 or cut == len(value) - 1:
        return ""
    token.value = value[: cut + 1]
    return value[cut + 1 :]


def _put_tail(container: Any, key: Any, tail: str) -> None:
    """Hang ``tail`` (whole lines) after the line of ``container[key]``."""
    if not tail:
        return
    slot = _slot(container)
    items = container.ca.items.setdefault(key, [None, None, None, None])
    token = items[slot]
    if isinstance(token, CommentToken):
        token.value = (token.value if token.value.endswith("\n") else token.value + "\n") + tail
    else:
        items[slot] = CommentToken("\n" + tail, CommentMark(0), None)


def _append(node: CommentedMap, key: str, value: Any) -> None:
    """Add ``key`` after the map's last key, moving the comments and blank lines that followed it below the new key."""
    tail = ""
    if len(node) and not node.fa.flow_style():
        container, last = _deepest_last(node)
        tail = _take_tail(container, last)
    node[key] = value
    if tail:
        container, last = _deepest_last(node)
        _put_tail(container, last, tail)


def _set_in(doc: CommentedMap, parts: list[str], value: Any) -> None:
    node, index = doc, 0
    while index < len(parts) - 1 and isinstance(node.get(parts[index]), dict):
        node = node[parts[index]]
        index += 1
    built = _node(copy.deepcopy(value))
    for name in reversed(parts[index + 1 :]):
        built = CommentedMap([(name, built)])
    name = parts[index]
    if name in node:
        node[name] = built
    else:
        _append(node, name, built)


def _remove_in(doc: CommentedMap, parts: list[str]) -> None:
    """Drop the key and every mapping it leaves empty (so the tier below answers)."""
    chain: list[tuple[CommentedMap, str]] = []
    node: Any = doc
    for name in parts[:-1]:
        child = node.get(name)
        if not isinstance(child, dict):
            return
        chain.append((node, name))
        node = child
    if parts[-1] not in node:
        return
    del node[parts[-1]]
    while not node and chain:
        parent, name = chain.pop()
        del parent[name]
        node = parent


def _is_comment(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _graft(original: str, base: str, new: str) -> str:
    """Carry the change from ``base`` (the loader's dump of ``original``) to ``new`` onto ``original``'s own lines.

    Lines the edit did not touch keep their original bytes; comment and blank
    lines the dump dropped with a removed key stay where they were. When the
    dump does not keep ``original``'s line structure, ``new`` is the answer.
    """
    old_lines = original.splitlines(keepends=True)
    base_lines = base.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    if len(old_lines) != len(base_lines):
        return new
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, base_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(old_lines[i1:i2])
            continue
        added = new_lines[j1:j2]
        present = Counter(line.rstrip("\r\n") for line in added)
        lead: list[str] = []
        rest: list[str] = []
        seen_data = False
        for line in old_lines[i1:i2]:
            if not _is_comment(line):
                seen_data = True
                continue
            text = line.rstrip("\r\n")
            if present[text]:
                present[text] -= 1
                continue
            (rest if seen_data else lead).append(line)
        out.extend(lead + added + rest)
    return "".join(line if line.endswith("\n") or i == len(out) - 1 else line + "\n" for i, line in enumerate(out))


def edit_yaml(text: str, edits: list[Edit], *, path: str) -> str:
    """``text`` (a YAML mapping) with ``edits`` made, every untouched line byte for byte; SettingsRefusal when
    it does not parse or is not a mapping."""
    yaml = _yaml_for(text)
    try:
        doc = yaml.load(text) if text.strip() else None
        pristine = _yaml_for(text).load(text) if doc is not None else None
    except YAMLError as exc:
        raise SettingsRefusal(REFUSED, f"{path}: does not parse, so it cannot be edited: {exc}") from None
    prefix = ""
    if doc is None:
        doc = CommentedMap()
        prefix = text if not text or text.endswith("\n") else text + "\n"
    if not isinstance(doc, CommentedMap):
        raise SettingsRefusal(REFUSED, f"{path}: must be a mapping of keys to be edited")
    for edit in edits:
        parts = edit.key.split(".")
        if edit.op == REMOVE:
            _remove_in(doc, parts)
        else:
            _set_in(doc, parts, edit.value)
    new = _dump(yaml, doc)
    if pristine is None:
        return prefix + new if new else text
    return _graft(text, _dump(yaml, pristine), new)


def edit_markdown(text: str, edits: list[Edit], *, path: str) -> str:
    """A markdown entity file with ``edits`` made in its frontmatter; the body and the fences keep their bytes."""
    try:
        block, body, _ = frontmatter.split(text, path=path)
    except frontmatter.FrontmatterError as exc:
        raise SettingsRefusal(REFUSED, str(exc)) from None
    if block is None:
        new_block = edit_yaml("", edits, path=path)
        return f"{frontmatter.FENCE}\n{new_block}{frontmatter.FENCE}\n{text}" if new_block else text
    lines = text.splitlines(keepends=True)
    opening, closing = lines[0], lines[1 + len(block.splitlines(keepends=True))]
    return opening + edit_yaml(block, edits, path=path) + closing + body


def edit_file(path: str, text: str, edits: list[Edit]) -> str:
    """The file's new text: the manifest as YAML, an entity's markdown through its frontmatter."""
    if path.endswith(".md"):
        return edit_markdown(text, edits, path=path)
    return edit_yaml(text, edits, path=path)


# --- What a write reaches: validation and oversight --------------------------------------


def _reached(tip_after: BrainSnapshot, definition: EntityDefinition | None) -> list[tuple[str, str]]:
    if definition is not None:
        return [(definition.target_kind, definition.slug)]
    return [(e.target_kind, e.slug) for e in tip_after.entities]


def breakages(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[str]:
    """Every entity the write would break, as "<kind>:<id>: <the loader's reason>" (brain-wide errors first).

    The target entity must load after the write; any other entity reached
    must not gain an error it did not have.
    """
    lines = [error for error in after.errors if error not in before.errors]
    for kind, slug in _reached(after, definition):
        now, then = after.entity(kind, slug), before.entity(kind, slug)
        if now is None or not now.error:
            continue
        if definition is not None or then is None or then.error != now.error:
            lines.append(f"{kind}:{slug}: {now.error}")
    return lines


def _rank(knob: str, value: Any) -> float:
    return float(RANKED[knob].get(value, 0))


def _leaf(terms: dict[str, Any], knob: str) -> Any:
    node: Any = terms.get("loop") or {}
    for name in knob.split("."):
        node = node.get(name) if isinstance(node, dict) else None
    return node


def knob_widenings(subject: str, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The widenings between two resolved terms of one entity: [{subject, knob, from, to}].

    autonomy.decide / merge human → auto; onInconclusive human → close → ship;
    onUnmeasured pause → continue; requireCalibration true → false;
    watch.onInconclusive revert → keep; maxConsecutiveRegressions raised or
    null (no breaker); editablePaths gaining a path; protectedPaths losing one;
    maxChangedLines raised.
    """
    found: list[dict[str, Any]] = []

    def widened(knob: str, old: Any, new: Any) -> None:
        found.append({"subject": subject, "knob": f"loop.{knob}", "from": old, "to": new})

    for knob in RANKED:
        old, new = _leaf(before, knob), _leaf(after, knob)
        if old != new and _rank(knob, new) > _rank(knob, old):
            widened(knob, old, new)
    old, new = _leaf(before, "autonomy.maxConsecutiveRegressions"), _leaf(after, "autonomy.maxConsecutiveRegressions")
    if old != new and old is not None and (new is None or new > old):
        widened("autonomy.maxConsecutiveRegressions", old, new)
    old, new = _leaf(before, "editablePaths") or [], _leaf(after, "editablePaths") or []
    if set(new) - set(old):
        widened("editablePaths", old, new)
    old, new = _leaf(before, "protectedPaths") or [], _leaf(after, "protectedPaths") or []
    if set(old) - set(new):
        widened("protectedPaths", old, new)
    old, new = _leaf(before, "maxChangedLines"), _leaf(after, "maxChangedLines")
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and new > old:
        widened("maxChangedLines", old, new)
    return found


def _brain_switch(manifest: dict[str, Any]) -> bool:
    """The brain-wide loop switch: off only when the manifest says ``loop.enabled: false``."""
    loop = manifest.get("loop") if isinstance(manifest, dict) else None
    return not (isinstance(loop, dict) and loop.get("enabled") is False)


def widenings(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[dict[str, Any]]:
    """Every widening of oversight the write makes, judged on resolved values for every entity it reaches."""
    found: list[dict[str, Any]] = []
    if definition is None and not _brain_switch(before.manifest) and _brain_switch(after.manifest):
        found.append({"subject": MANIFEST_PATH, "knob": "loop.enabled", "from": False, "to": True})
    for kind, slug in _reached(after, definition):
        then, now = before.entity(kind, slug), after.entity(kind, slug)
        if then is None or now is None or not then.ok or not now.ok:
            continue
        found.extend(knob_widenings(f"{kind}:{slug}", then.terms, now.terms))
    return found


def _groups(definition: EntityDefinition | None) -> set[str]:
    if definition is None or not definition.ok:
        return set()
    loop = definition.terms.get("loop") or {}
    return {g for g in loop.get("group") or [] if g in (loop.get("groups") or {})}


def held_departures(before: BrainSnapshot, after: BrainSnapshot, definition: EntityDefinition | None) -> list[str]:
    """Each entity the write would take out of a lock group a hold stands on: "<kind>:<id> out of <group> (...)"."""
    from evolution import supervision

    lines: list[str] = []
    for kind, slug in _reached(after, definition):
        left = _groups(before.entity(kind, slug)) - _groups(after.entity(kind, slug))
        for group in sorted(left):
            try:
                row = supervision.standing_hold({"group": group})
            except supervision.Refusal:
                row = None
            if row is not None:
                lines.append(f"{kind}:{slug} would leave lock group {group}, held by {row.actor}: {row.reason}")
    return lines


# --- The lock ---------------------------------------------------------------------------


def _lock_secs() -> float:
    return float(getattr(settings, "LOOP_SETTINGS_LOCK_SECS", LOCK_SECS))


def _lock_busy() -> SettingsRefusal:
    return SettingsRefusal(
        CONFLICT, f"another loop-settings write held the lock for more than {_lock_secs():g}s: try again"
    )


@contextmanager
def settings_lock() -> Iterator[None]:
    """Hold the one lock of loop-settings writes: every process, every worker; SettingsRefusal(conflict) after
    settings.LOOP_SETTINGS_LOCK_SECS of waiting.

    On Postgres a transaction-scoped advisory lock (shared by every machine
    on the database; the block runs in that transaction); on SQLite, an
    exclusive file lock under settings.VAR_DIR.
    """
    deadline = time.monotonic() + _lock_secs()
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                while True:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
                    if cursor.fetchone()[0]:
                        break
                    if time.monotonic() > deadline:
                        raise _lock_busy()
                    time.sleep(0.05)
            yield
        return
    path = Path(getattr(settings, "LOOP_SETTINGS_LOCK", Path(settings.VAR_DIR) / "loop-settings.lock"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _lock_busy() from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- The write ----------------------------------------------------------------------------


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Staged:
    """A write made and validated in the clone: the file's bytes before and after, its diff, the widenings."""

    path: str
    before: bytes
    after: bytes
    edits: list[Edit]
    widened: list[dict[str, Any]]
    tip: Tip

    @property
    def diff(self) -> str:
        old = self.before.decode("utf-8").splitlines(keepends=True)
        new = self.after.decode("utf-8").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, fromfile=f"a/{self.path}", tofile=f"b/{self.path}"))

    def files(self) -> list[dict[str, str]]:
        if self.before == self.after:
            return []
        return [{"path": self.path, "diff": self.diff, "base": digest(self.before)}]


def _tip(clone: Path, branch: str, target: Entity | None) -> Tip:
    """Load the brain at the clone's head and find the target's definition and file there."""
    checkout = Checkout(path=clone, branch=branch)
    snapshot = load_brain(checkout, checkout.head())
    definition = None
    if target is not None:
        definition = snapshot.entity(target.target_kind, target.slug)
        if definition is None:
            raise SettingsRefusal(NOT_FOUND, f"{subject_of(target)} is not in the brain at {snapshot.commit[:12]}")
    path = definition.path if definition is not None else MANIFEST_PATH
    file = clone / path
    try:
        text = file.read_bytes().decode("utf-8") if file.exists() else ""
    except UnicodeDecodeError:
        raise SettingsRefusal(REFUSED, f"{path}: not UTF-8 text, so it cannot be edited") from None
    return Tip(snapshot=snapshot, definition=definition, path=path, text=text)


def _stage(
    clone: Path,
    branch: str,
    target: Entity | None,
    plan: Planner,
    expect: dict[str, str] | None,
    *,
    actor: str,
    op: str,
) -> Staged:
    """Plan the write on the clone's head, make it, commit it there and validate it; nothing leaves the clone."""
    tip = _tip(clone, branch, target)
    before = tip.text.encode("utf-8")
    if expect and tip.path in expect and expect[tip.path] != digest(before):
        raise SettingsRefusal(
            CONFLICT, f"{tip.path} changed since it was read (it is at {tip.snapshot.commit[:12]} now): try again"
        )
    edits = plan(tip)
    after = edit_file(tip.path, tip.text, edits).encode("utf-8") if edits else before
    staged = Staged(path=tip.path, before=before, after=after, edits=edits, widened=[], tip=tip)
    if after == before:
        return staged
    (clone / tip.path).parent.mkdir(parents=True, exist_ok=True)
    (clone / tip.path).write_bytes(after)
    git("add", "--", tip.path, cwd=clone)
    summary = "; ".join(e.words() for e in edits)
    message = f"settings({tip.subject}): {summary}"[:200] + f"\n\n{op} by {actor}.\n"
    git("commit", "--quiet", "--no-verify", f"--author={_author(actor)}", "-m", message, cwd=clone)
    checkout = Checkout(path=clone, branch=branch)
    snapshot = load_brain(checkout, checkout.head())
    broken = breakages(tip.snapshot, snapshot, tip.definition)
    if broken:
        raise SettingsRefusal(
            REFUSED, "the write would break what it reaches, so nothing was written: " + "; ".join(broken)
        )
    departures = held_departures(tip.snapshot, snapshot, tip.definition)
    if departures:
        raise SettingsRefusal(
            REFUSED, "; ".join(departures) + " — the hold would stop applying to it; lifting a hold is loop_release's"
        )
    staged.widened = widenings(tip.snapshot, snapshot, tip.definition)
    return staged


def _author(actor: str) -> str:
    name = re.sub(r"[<>\n]", "", actor).strip() or "someone"
    return f"{name} <settings@singularity.local>"


def _push(clone: Path, branch: str) -> None:
    """Push the clone's head to the default branch (never forced); GitError when the remote refuses."""
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)


def _moved(clone: Path, branch: str, onto: str) -> str | None:
    """The remote tip when it moved off ``onto`` (the commit the write was made on), else None."""
    git("fetch", "--quiet", "origin", branch, cwd=clone)
    tip = git("rev-parse", "FETCH_HEAD", cwd=clone).decode().strip()
    return tip if tip != onto else None


def _bytes_at(clone: Path, commit: str, path: str) -> bytes:
    try:
        return git("show", f"{commit}:{path}", cwd=clone)
    except GitError:
        return b""


def _sync() -> str:
    """Sync the brain so the rows read the write at once; "" or why it failed (the periodic sync catches up)."""
    from grading.sync import sync_brain

    try:
        sync_brain()
    except Exception as exc:  # noqa: BLE001 - the write stands; the periodic sync retries
        log.exception("loop settings: the brain sync after a write failed")
        return f"{type(exc).__name__}: {exc}"
    return ""


def _run(
    target: Entity | None,
    plan: Planner,
    *,
    op: str,
    actor: str,
    dry_run: bool,
    expect: dict[str, str] | None,
    allow_widen: bool,
) -> tuple[Answer, Staged | None]:
    """Make (or, dry run, only validate) one write; see the module docstring for the steps."""
    from evolution.apply import throwaway_clone
    from evolution.forges import get_forge

    actor = (actor or "").strip()
    if not actor:
        raise SettingsRefusal(INVALID, "a loop-settings write needs the actor who makes it")
    forge = get_forge()
    branch = forge.default_branch()
    answer = Answer(dry_run=dry_run, subject=subject_of(target))
    lock = nullcontext() if dry_run else settings_lock()
    with lock, throwaway_clone(forge.remote_url(), branch, label="settings") as clone:
        staged = None
        for _ in range(ATTEMPTS):
            onto = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            staged = _stage(clone, branch, target, plan, expect, actor=actor, op=op)
            answer.files, answer.widened = staged.files(), staged.widened
            answer.summary = "; ".join(e.words() for e in staged.edits)
            if staged.widened and not allow_widen:
                raise SettingsRefusal(REFUSED, _widen_refusal(staged.widened), widened=staged.widened)
            if dry_run or not answer.changed:
                return answer, staged
            try:
                _push(clone, branch)
            except GitError:
                tip = _moved(clone, branch, onto)
                if tip is None:
                    raise
                if _bytes_at(clone, tip, staged.path) != staged.before:
                    raise SettingsRefusal(
                        CONFLICT, f"{staged.path} changed while the write was being made: try again"
                    ) from None
                log.info("loop settings: %s moved under the write to %s; making it again", branch, staged.path)
                git("reset", "--quiet", "--hard", tip, cwd=clone)
                expect = {staged.path: digest(staged.before)}
                continue
            answer.commit = git("rev-parse", "HEAD", cwd=clone).decode().strip()
            _record(target, staged, answer, op=op, actor=actor)
            break
        else:
            raise SettingsRefusal(CONFLICT, f"{branch} kept moving ({ATTEMPTS} tries): try again")
    sync_error = _sync()
    if sync_error:
        log.warning("loop settings: commit %s stands; the sync will catch up (%s)", answer.commit, sync_error)
    return answer, staged


def _record(target: Entity | None, staged: Staged, answer: Answer, *, op: str, actor: str) -> ActionLog:
    """The action-log row of a write that changed something."""
    row = ActionLog.objects.create(
        actor=actor[:200],
        op=op,
        subject=answer.subject,
        entity=target,
        summary=f"{op} {answer.subject}: {answer.summary}",
        diff=staged.diff,
        commit=answer.commit or "",
        created_at=timezone.now(),
    )
    log.info("loop settings: %s by %s: %s (%s)", op, actor, answer.summary, (answer.commit or "")[:12])
    return row


def _widen_refusal(widened: list[dict[str, Any]]) -> str:
    named = "; ".join(f"{w['subject']} {w['knob']}: {_show(w['from'])} → {_show(w['to'])}" for w in widened)
    return f"loop_set does not hand oversight to the machine: this write widens {named}. Use loop_widen, which a person approves"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- loop_set and loop_widen ------------------------------------------------------------------


def check_key(key: str, op: str, value: Any, target: Entity | None) -> None:
    """SettingsRefusal(invalid) for a key, op or value no tier could take; R5.24's entity retentionDays refused."""
    if op not in (SET, REMOVE):
        raise SettingsRefusal(INVALID, f"op: {op!r} is not set or remove")
    if not isinstance(key, str) or not KEY.match(key):
        raise SettingsRefusal(INVALID, f"key: {key!r} is not a dotted loop.* or evaluation.* key")
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise SettingsRefusal(INVALID, f"value: {value!r} is not plain data") from None
    if target is not None and key.startswith("loop.lessons") and op == SET:
        written = value if key == "loop.lessons" else {key.split(".")[-1]: value}
        if isinstance(written, dict) and "retentionDays" in written:
            raise SettingsRefusal(
                REFUSED,
                "loop.lessons.retentionDays on an entity is read by nothing: the lesson sweep reads "
                f"{MANIFEST_PATH}'s; write it at the brain tier",
            )


def key_edits(tip: Tip, key: str, op: str, value: Any) -> list[Edit]:
    """The edits one key makes at the tier: at the entity tier, a key inside a wholesale block the entity does
    not write itself copies the block as the entity sees it now, with that key replaced."""
    parts = key.split(".")
    definition = tip.definition
    if definition is None or len(parts) < 3 or parts[1] not in WHOLESALE.get(parts[0], ()):
        return [Edit(key, op, value)]
    block, name = parts[0], parts[1]
    own = (definition.frontmatter.get(block) or {}) if isinstance(definition.frontmatter, dict) else {}
    if isinstance(own, dict) and name in own:
        return [Edit(key, op, value)]
    if op == REMOVE:
        return []  # nothing of this tier's own to drop
    if not definition.ok:
        raise SettingsRefusal(
            REFUSED, f"{tip.subject}'s settings do not load, so its {block}.{name} cannot be copied: {definition.error}"
        )
    seen = copy.deepcopy((definition.terms.get(block) or {}).get(name) or {})
    if block == "loop" and name == "lessons":
        seen.pop("retentionDays", None)
    node = seen
    for step in parts[2:-1]:
        if not isinstance(node.get(step), dict):
            node[step] = {}
        node = node[step]
    node[parts[-1]] = value
    return [Edit(f"{block}.{name}", SET, seen)]


def loop_set(
    target: Entity | None,
    key: str,
    op: str = SET,
    value: Any = None,
    *,
    actor: str,
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """Set or remove one loop/evaluation key at the entity's tier (None: the manifest); refuse a widening.

    Asks nobody: narrowing writes and writes no person relies on go through
    (pulling either kill switch included). Raises SettingsRefusal.
    """
    check_key(key, op, value, target)
    answer, _ = _run(
        target,
        lambda tip: key_edits(tip, key, op, value),
        op=OP_SET,
        actor=actor,
        dry_run=dry_run,
        expect=expect,
        allow_widen=False,
    )
    return answer


def loop_widen(
    target: Entity | None,
    key: str,
    op: str = SET,
    value: Any = None,
    *,
    actor: str,
    is_agent: bool,
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """loop_set's write, widenings allowed once a person approves: a person calling it is the approval; an
    agent's call opens a widen card (answer ``pending``) unless the write widens nothing. Raises SettingsRefusal."""
    check_key(key, op, value, target)

    def plan(tip: Tip) -> list[Edit]:
        return key_edits(tip, key, op, value)

    if is_agent and not dry_run:
        preview, staged = _run(target, plan, op=OP_WIDEN, actor=actor, dry_run=True, expect=expect, allow_widen=True)
        if preview.widened:
            card = _open_card(target, key, op, value, actor=actor, preview=preview, staged=staged)
            preview.dry_run, preview.pending, preview.card_id = False, True, str(card.pk)
            return preview
    answer, _ = _run(target, plan, op=OP_WIDEN, actor=actor, dry_run=dry_run, expect=expect, allow_widen=True)
    return answer


# --- loop_join ---------------------------------------------------------------------------


def feature_of(path: str) -> str:
    """The feature an entity file ships in: the folder right under ``features/`` ("" outside it)."""
    parts = PurePosixPath(path).parts
    return parts[1] if len(parts) > 2 and parts[0] == "features" else ""


def feature_switched_off(manifest: dict[str, Any], feature: str) -> bool:
    """Whether the manifest switches the feature off (``features: {<feature>: {enabled: false}}``)."""
    features = manifest.get("features") if isinstance(manifest, dict) else None
    decl = features.get(feature) if isinstance(features, dict) else None
    return isinstance(decl, dict) and decl.get("enabled") is False


def unattended(definition: EntityDefinition) -> bool:
    """Nobody decides each execution: a heartbeat, a chat role, a scenario with a schedule."""
    return definition.kind in ("heartbeat", "role") or bool(definition.schedule)


def join_edits(tip: Tip, daily_cap: int | None) -> list[Edit]:
    """The edits loop_join makes on the entity, or SettingsRefusal naming why it cannot join."""
    definition = tip.definition
    assert definition is not None
    manifest = tip.snapshot.manifest
    subject = tip.subject
    feature = feature_of(definition.path)
    if feature and feature_switched_off(manifest, feature):
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject}: its feature {feature} is switched off ({MANIFEST_PATH} features.{feature}.enabled)",
        )
    if not _brain_switch(manifest):
        raise SettingsRefusal(
            PRECONDITION,
            f"the brain's loop switch is off ({MANIFEST_PATH} loop.enabled: false); turning it back on is loop_widen's",
        )
    if not definition.ok:
        raise SettingsRefusal(REFUSED, f"{subject}'s loop settings do not load: {definition.error}")
    evaluation = definition.terms["evaluation"]
    brain_grading = manifest.get("evaluation") if isinstance(manifest.get("evaluation"), dict) else {}
    if not evaluation["enabled"] and brain_grading.get("enabled") is False:
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject} is not graded yet and the brain's grading switch is off ({MANIFEST_PATH} evaluation.enabled: false)",
        )
    edits: list[Edit] = []
    if daily_cap is not None:
        if isinstance(daily_cap, bool) or not isinstance(daily_cap, int) or daily_cap < 1:
            raise SettingsRefusal(INVALID, f"dailyCap: {daily_cap!r} is not a whole number of runs, at least 1")
        edits.append(Edit("evaluation.sample.maxPerDay", SET, daily_cap))
    elif unattended(definition) and evaluation["sample"]["maxPerDay"] is None:
        raise SettingsRefusal(
            PRECONDITION,
            f"{subject} runs on its own and no tier sets evaluation.sample.maxPerDay: name dailyCap (the daily "
            "grading ceiling) to join it",
        )
    edits += [Edit("evaluation.enabled", SET, True), Edit("loop.enabled", SET, True)]
    if isinstance(definition.frontmatter, dict) and definition.frontmatter.get("enabled") is False:
        edits.append(Edit("enabled", SET, True))
    return edits


def loop_join(
    target: Entity | None,
    *,
    actor: str,
    daily_cap: int | None = None,
    dry_run: bool = False,
    expect: dict[str, str] | None = None,
) -> Answer:
    """Turn the loop on for an entity: evaluation.enabled and loop.enabled true (and its own ``enabled`` back to
    true when it was paused: ``resumed``); ``daily_cap`` writes evaluation.sample.maxPerDay. Raises SettingsRefusal."""
    if target is None:
        raise SettingsRefusal(INVALID, "loop_join names an entity (targetKind and targetId)")
    answer, staged = _run(
        target,
        lambda tip: join_edits(tip, daily_cap),
        op=OP_JOIN,
        actor=actor,
        dry_run=dry_run,
        expect=expect,
        allow_widen=False,
    )
    answer.resumed = bool(staged and any(e.key == "enabled" for e in staged.edits) and answer.changed)
    return answer


# --- The widen card ---------------------------------------------------------------------


def _request_key(target: Entity | None, key: str, op: str, value: Any, expect: dict[str, str]) -> str:
    body = json.dumps([subject_of(target), key, op, value, expect], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def _open_card(
    target: Entity | None, key: str, op: str, value: Any, *, actor: str, preview: Answer, staged: Staged | None
) -> Any:
    """Open (or find, for the same request) the widen card an agent's loop_widen waits on."""
    from evolution import status
    from hitl.actions import open_card
    from hitl.models import Card

    expect = {f["path"]: f["base"] for f in preview.files}
    request = _request_key(target, key, op, value, expect)
    pending = Card.objects.filter(
        producer=PRODUCER, kind=Card.Kind.WIDEN, status=Card.Status.PENDING, payload__request=request
    ).first()
    if pending is not None:
        return pending
    hours = CARD_HOURS
    if staged is not None and staged.tip.definition is not None and staged.tip.definition.ok:
        hours = staged.tip.definition.terms["loop"].get("reviewDeadlineHours") or CARD_HOURS
    edit = Edit(key, op, value)
    url = policy_path(target)
    return open_card(
        producer=PRODUCER,
        kind=Card.Kind.WIDEN,
        key=f"{PRODUCER}:widen:{uuid.uuid4().hex}",
        title=f"Widen oversight: {preview.subject} {edit.words()}"[:200],
        subject=preview.subject[:200],
        subject_url=status.absolute(url),
        text=card_text(actor, edit, preview),
        expires_at=timezone.now() + timedelta(hours=float(hours)),
        options=[{"value": APPROVE, "label": "Approve"}, {"value": DECLINE, "label": "Decline"}],
        payload={
            "request": request,
            "targetKind": target.target_kind if target is not None else None,
            "targetId": target.slug if target is not None else None,
            "key": key,
            "op": op,
            "value": value,
            "actor": actor,
            "expect": expect,
            "widened": preview.widened,
        },
    )


def card_text(actor: str, edit: Edit, preview: Answer) -> str:
    """The widen card's text: who asks, each widening, the diff of the write."""
    lines = [f"{actor} asks to widen oversight on {preview.subject}: {edit.words()}.", "", "This widens:"]
    lines += [f"- {w['subject']} {w['knob']}: {_show(w['from'])} → {_show(w['to'])}" for w in preview.widened]
    diff = "".join(f["diff"] for f in preview.files)
    if len(diff) > CARD_DIFF_CHARS:
        diff = diff[:CARD_DIFF_CHARS] + "\n… (the rest of the diff is on the dashboard)\n"
    lines += [
        "",
        "The write:",
        diff.rstrip("\n"),
        "",
        "Approve makes this write as you; Decline leaves the file as it is.",
    ]
    return "\n".join(lines)


def on_widen_card(card: Any) -> None:
    """Hear a closed widen card (producer ``loop-settings``): make the write when a person approved it.

    Made over the bytes the card showed: a file changed since answers
    conflict. A write that can no longer be made is said in a notice.
    """
    from hitl.actions import post_notice
    from hitl.models import Card

    payload = card.payload or {}
    choice = (card.answer or {}).get("choice") if isinstance(card.answer, dict) else None
    if card.status != Card.Status.ANSWERED or choice != APPROVE:
        log.info("loop settings: widen card %s not approved (%s)", card.pk, card.status)
        return
    person = card.responded_by.get_username() if card.responded_by is not None else "someone"
    actor = f"{payload.get('actor', '?')} (approved by {person})"
    try:
        target = target_named(payload.get("targetKind"), payload.get("targetId"))
        loop_widen(
            target,
            payload.get("key", ""),
            payload.get("op", SET),
            payload.get("value"),
            actor=actor,
            is_agent=False,
            expect=payload.get("expect") or None,
        )
    except SettingsRefusal as refusal:
        log.warning("loop settings: approved widen card %s not applied: %s", card.pk, refusal.detail)
        post_notice(
            producer=PRODUCER,
            kind="not_applied",
            title=f"Not applied: {card.title}"[:200],
            text=f"{person} approved it, but the write could not be made ({refusal.code}): {refusal.detail}",
            url=card.subject_url,
            subject=card.subject,
        )


# --- Reads for the pages -----------------------------------------------------------------


def policy_path(target: Entity | None) -> str:
    """Where a person edits the tier: the entity's Policy view, or Settings → Policy defaults."""
    from django.urls import reverse

    if target is None:
        return reverse("evolution:settings")
    return reverse("evolution:entity-policy", args=[target.target_kind, target.slug])


def actions(target: Entity | None = None, *, manifest: bool = False, limit: int = 50) -> list[ActionLog]:
    """Action-log rows newest first: the entity's, the manifest's (``manifest=True``), or everyone's."""
    rows = ActionLog.objects.all()
    if target is not None:
        rows = rows.filter(entity=target)
    elif manifest:
        rows = rows.filter(subject=MANIFEST_PATH)
    return list(rows.order_by("-created_at", "-id")[:limit])


def widens_family(key: str) -> bool:
    """Whether the dashboard saves ``key`` through loop_widen's op (an autonomy, perimeter or switch knob)."""
    return key in JUDGED or key == "loop.enabled" or key.startswith("loop.autonomy.")
