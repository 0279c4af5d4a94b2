"""The diff gate: what a change may touch, read off the tree before anything is committed (seed 003).

The allow-list is the accepted proposal: the files it names, plus the
entity's ``loop.editablePaths``. The engine floor is closed to every cycle
whatever the tiers say: every ``*.loop.py``, the judge's files
(``constitution/Evaluation/**``), the brain's manifest (the loop's own
settings), every other entity's definition files, the code of every proposer
pipeline the loop names, and the entity's resolved ``loop.protectedPaths``.

The gate reads the changed paths off a throwaway clone (``git add -A`` then
``git diff --cached`` against the exact base commit), never from the
proposal's word, and refuses — naming each offending path and why — a path
that is not a plain brain-relative file name, is outside the editable surface
or under the floor, is a symlink or sits under one the base tracks, is
binary, or moves a markdown entity file's ``evaluation:`` / ``loop:`` /
``chat:`` / ``budget:`` block; and the change as a whole past
``loop.maxChangedLines`` (added + removed lines), naming the count, the bound
and the three largest files. ``check`` returns the gate's record: the paths,
the line count and a digest of every gated file's content, which the landing
re-checks before it commits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypedDict

from evolution.steering.supervision import groups_of
from grading.models import Entity
from singularity.brain.frontmatter import FrontmatterError, parse, split
from singularity.brain.git import GitError, git

#: Characters that make a path a pattern rather than a file name.
GLOB_CHARS = ("*", "?", "[")
#: The frontmatter blocks of a markdown entity file that a change must keep byte-identical.
MEASUREMENT_BLOCKS = ("evaluation", "loop", "chat", "budget")
#: Markdown entity files (their frontmatter carries the measurement blocks).
ENTITY_SUFFIXES = (".scenario.md", ".heartbeat.md", ".agent.md")
#: loop.maxChangedLines when the terms carry none.
DEFAULT_MAX_CHANGED_LINES = 600
#: A NUL byte within this many leading bytes makes a file binary (git's own heuristic).
BINARY_PROBE_BYTES = 8000
SYMLINK_MODE = "120000"
SUBMODULE_MODE = "160000"
#: A top-level YAML key at column 0 (optionally quoted), followed by a colon.
_TOP_KEY = re.compile(r"""^(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\1[ \t]*:(?=[ \t\r\n]|$)""")


class GateRefused(Exception):
    """The gate refused the change: ``message`` says what and where, ``paths`` lists the offending paths."""

    def __init__(self, message: str, paths: Sequence[str]) -> None:
        super().__init__(message)
        self.message = message
        self.paths = list(paths)


class GateRecord(TypedDict):
    """What the gate read: the changed paths, the line count, and a sha256 of each one's new content."""

    base: str
    paths: list[str]
    lines: int
    bound: int
    files: dict[str, int]
    #: path -> sha256 hex of the content as staged; None for a deleted file.
    digests: dict[str, str | None]


# --- Paths a proposal may name -------------------------------------------------------------


def path_problem(path: Any) -> str | None:
    """Why ``path`` is not a plain brain-root-relative file name (a glob, a '..' segment, absolute…), or None."""
    if not isinstance(path, str) or not path:
        return "not a file path"
    if "\0" in path or "\\" in path:
        return "contains a NUL or a backslash"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "an absolute path (paths are relative to the brain's root)"
    if any(ch in path for ch in GLOB_CHARS):
        return "a glob (a proposal names files, never patterns)"
    segments = path.split("/")
    if ".." in segments:
        return "a '..' segment"
    if path.endswith("/") or any(seg in ("", ".") for seg in segments):
        return "not a plain file path (empty or '.' segment, or a trailing slash)"
    if any(seg.lower() == ".git" for seg in segments):
        return "inside .git"
    return None


def validate_paths(paths: Iterable[Any]) -> list[str]:
    """Return ``paths`` when each is a plain file path named once; GateRefused naming every one that is not."""
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    out: list[str] = []
    for path in paths:
        why = path_problem(path)
        label = path if isinstance(path, str) else repr(path)
        if why:
            problems.append((label, why))
        elif path in seen:
            problems.append((label, "named twice"))
        else:
            seen.add(path)
            out.append(path)
    if problems:
        raise GateRefused(_message("the proposal names paths the loop cannot write", problems), _paths(problems))
    return out


def write_proposal(clone: Path, files: Sequence[dict[str, Any]]) -> list[str]:
    """Write each ``{path, content}`` into ``clone`` (None deletes); return the paths written.

    Never writes or deletes through a link: a path that is itself a symlink or
    sits under one is refused (GateRefused) before anything is touched, as
    are a content that is not text, a path where a directory stands, and a
    deletion of a file that is not there.
    """
    paths = validate_paths(f.get("path") if isinstance(f, dict) else None for f in files)
    problems: list[tuple[str, str]] = []
    root = clone.resolve()
    for entry, path in zip(files, paths, strict=True):
        content = entry.get("content")
        target = root / path
        link = _link_on_the_way(root, path)
        if link:
            problems.append((path, f"under {link}, a symlink (nothing is written or deleted through a link)"))
        elif content is not None and not isinstance(content, str):
            problems.append((path, "its content is not text"))
        elif target.is_dir():
            problems.append((path, "a directory in the base, not a file"))
        elif content is None and not target.exists():
            problems.append((path, "deleted, but there is no such file in the base"))
    if problems:
        raise GateRefused(_message("the proposal cannot be written", problems), _paths(problems))
    for entry, path in zip(files, paths, strict=True):
        target = root / path
        if entry.get("content") is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(entry["content"].encode("utf-8"))
    return paths


def _link_on_the_way(root: Path, path: str) -> str | None:
    """The first component of ``path`` under ``root`` (itself included) that is a symlink, or None."""
    current = root
    parts = PurePosixPath(path).parts
    for index, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            return "/".join(parts[: index + 1])
        if not current.exists():
            return None
    return None


# --- The surface ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One path rule: ``exact`` (that file), ``tree`` (that file or anything under it), ``glob`` or ``name``."""

    pattern: str
    why: str
    kind: str = "tree"

    @classmethod
    def of(cls, pattern: str, why: str) -> Rule:
        """A rule from a settings list entry: a glob, ``dir/`` (everything under it), or a file or folder."""
        if any(ch in pattern for ch in GLOB_CHARS):
            return cls(pattern, why, "glob")
        return cls(pattern.rstrip("/"), why, "tree")

    def matches(self, path: str, *, fold: bool = False) -> bool:
        """Whether ``path`` falls under this rule (case-insensitively when ``fold``)."""
        pattern, subject = (self.pattern.casefold(), path.casefold()) if fold else (self.pattern, path)
        if self.kind == "exact":
            return subject == pattern
        if self.kind == "name":
            return subject.rsplit("/", 1)[-1] == pattern
        if self.kind == "glob":
            return glob_regex(pattern).fullmatch(subject) is not None
        return subject == pattern or subject.startswith(pattern + "/")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a brain-root-relative glob: ``**`` spans folders, ``*`` and ``?`` stay within one, ``[…]`` a class."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


@dataclass(frozen=True)
class Surface:
    """Where a change may land: ``editable`` opens a path, ``floor`` (checked first) closes it."""

    editable: tuple[Rule, ...]
    floor: tuple[Rule, ...]
    max_changed_lines: int
    #: For a lock-group member: its own loop.editablePaths, the only way an existing shared file opens to it.
    shared_opened_by: tuple[Rule, ...] | None = None

    def shared_denial(self, path: str, *, new: bool) -> str | None:
        """Why a group member may not rewrite ``path``, an existing file of a kind the group's members share."""
        if self.shared_opened_by is None or new or not is_shared_kind(path):
            return None
        if any(rule.matches(path) for rule in self.shared_opened_by):
            return None
        return (
            "a file the lock group's members share (a *.agent.md role, skills/**, constitution/Planner/**): only "
            "this entity's own loop.editablePaths opens it"
        )

    def denial(self, path: str) -> str | None:
        """Why ``path`` is closed to the change, or None when it is open."""
        for rule in self.floor:
            if rule.matches(path, fold=True):
                return rule.why
        if not any(rule.matches(path) for rule in self.editable):
            return "not on this round's editable surface (the proposal's files and loop.editablePaths)"
        return None

    def as_dict(self) -> dict[str, Any]:
        """The surface for a brief or a page: editable and denied patterns, and the line bound."""
        return {
            "editable": [r.pattern for r in self.editable],
            "denied": [{"path": r.pattern, "why": r.why} for r in self.floor],
            "maxChangedLines": self.max_changed_lines,
        }


def surface(entity: Entity, targets: Iterable[str] = ()) -> Surface:
    """The resolved surface of ``entity`` for a round that targets ``targets``, the floor read from the rows now."""
    loop = dict((entity.terms or {}).get("loop") or {})
    editable = [Rule(path, "a file the proposal names", "exact") for path in targets]
    editable += [Rule.of(p, "loop.editablePaths") for p in loop.get("editablePaths") or [] if isinstance(p, str)]
    bound = loop.get("maxChangedLines")
    own = tuple(Rule.of(p, "loop.editablePaths") for p in loop.get("editablePaths") or [] if isinstance(p, str))
    return Surface(
        editable=tuple(editable),
        floor=tuple(floor(entity)),
        max_changed_lines=DEFAULT_MAX_CHANGED_LINES if bound is None else int(bound),
        shared_opened_by=own if groups_of(entity) else None,
    )


#: The kinds of file a lock group's members share (seed 003, "What the loop may not touch").
SHARED_PREFIXES = ("skills/", "constitution/Planner/")


def is_shared_kind(path: str) -> bool:
    return path.endswith(".agent.md") or path.startswith(SHARED_PREFIXES)


#: The judge's and the loop's own words: no entity's change may rewrite its grader or its proposer (R10.3).
JUDGE_AND_LOOP_FILES = (
    ("constitution/Agents/system/role-evaluator.md", "the evaluator role (the judge's own prompt: engine floor)"),
    ("constitution/Agents/system/role-general.md", "every role's grant, the judge's included (engine floor)"),
    ("constitution/Agents/system/loop", "the loop's own roles (constitution/Agents/system/loop/**: engine floor)"),
    ("constitution/Loop", "the loop's own prompts (constitution/Loop/**: engine floor)"),
)


def floor(entity: Entity) -> list[Rule]:
    """The engine floor for ``entity``'s change, plus its resolved loop.protectedPaths; each rule says why."""
    rules = [
        Rule("**/*.loop.py", "a *.loop.py file (the judge's code: engine floor)", "glob"),
        Rule("constitution/Evaluation", "the judge's files (constitution/Evaluation/**: engine floor)"),
        Rule("constitution/MANIFEST.yaml", "the brain's manifest (the loop's own settings: engine floor)", "exact"),
    ]
    rules += [Rule(path, why) for path, why in JUDGE_AND_LOOP_FILES]
    mine = set(groups_of(entity))
    proposers: set[str] = set()
    for other in Entity.objects.only("pk", "target_kind", "slug", "path", "pipeline_path", "loop_module_path", "terms"):
        pipeline = (((other.terms or {}).get("loop") or {}).get("proposer") or {}).get("pipeline")
        if isinstance(pipeline, str) and pipeline:
            proposers.add(pipeline)
        if other.pk == entity.pk:
            continue
        label = f"{other.target_kind}:{other.slug}"
        for path in (other.path, other.pipeline_path, other.loop_module_path):
            if path:
                rules.append(Rule(path, f"the definition of {label}, another entity (engine floor)", "exact"))
        theirs = set(groups_of(other))
        if theirs and not theirs & mine:
            # What a lock-group member claims is closed to every entity that shares no group with it.
            claimed = ((other.terms or {}).get("loop") or {}).get("editablePaths") or []
            for path in claimed:
                if isinstance(path, str) and path:
                    why = f"claimed by {label}'s loop.editablePaths (lock group {', '.join(sorted(theirs))})"
                    rules.append(Rule.of(path, why))
    for pipeline in sorted(proposers):
        why = f"the code of the proposer pipeline {pipeline} (engine floor)"
        rules.append(Rule(f"{pipeline}.pipeline.py", why, "name"))
    loop = (entity.terms or {}).get("loop") or {}
    for path in loop.get("protectedPaths") or []:
        if isinstance(path, str) and path:
            rules.append(Rule.of(path, f"protected by loop.protectedPaths ({path})"))
    return rules


# --- The gate -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One path the tree changed, as ``git diff --raw`` reports it."""

    path: str
    status: str  # A | M | D | T
    old_mode: str
    new_mode: str


def check(clone: Path, base_sha: str, entity: Entity, targets: Iterable[str]) -> GateRecord:
    """Gate the working tree of ``clone`` against commit ``base_sha``; return the record or raise GateRefused.

    Stages the whole tree (``git add -A``) and reads what changed from git
    alone. ``targets`` are the round's target files (the proposal's paths).
    """
    targets = list(targets)
    git("add", "--all", ".", cwd=clone)
    changes = _changes(clone, base_sha)
    if not changes:
        raise GateRefused(
            f"the change changes nothing: every file the proposal names already reads so at {base_sha[:12]}",
            targets,
        )
    gate = surface(entity, targets)
    counts = _numstat(clone, base_sha)
    links = _tracked_links(clone, base_sha)
    problems: list[tuple[str, str]] = []
    offending: list[str] = []
    digests: dict[str, str | None] = {}
    for change in changes:
        new = None if change.status == "D" else git("cat-file", "blob", f":{change.path}", cwd=clone)
        digests[change.path] = None if new is None else hashlib.sha256(new).hexdigest()
        for why in _path_problems(clone, base_sha, change, new, gate, links, counts):
            problems.append((change.path, why))
            offending.append(change.path)
    files = {c.path: sum(counts[c.path]) for c in changes if counts.get(c.path) is not None}
    lines = sum(files.values())
    if lines > gate.max_changed_lines:
        largest = sorted(files.items(), key=lambda item: (-item[1], item[0]))[:3]
        named = ", ".join(f"{path} ({n})" for path, n in largest)
        why = (
            f"{lines} lines (added + removed), past loop.maxChangedLines {gate.max_changed_lines};"
            f" the largest files: {named}"
        )
        problems.append(("the whole change", why))
        offending.extend(path for path, _ in largest)
    if problems:
        raise GateRefused(_message("the diff gate refused the change", problems), _dedupe(offending))
    return GateRecord(
        base=base_sha,
        paths=[c.path for c in changes],
        lines=lines,
        bound=gate.max_changed_lines,
        files=files,
        digests=digests,
    )


def _path_problems(
    clone: Path,
    base_sha: str,
    change: Change,
    new: bytes | None,
    gate: Surface,
    links: set[str],
    counts: dict[str, tuple[int, int] | None],
) -> list[str]:
    """Every reason the gate refuses this one changed path (empty when it passes)."""
    path = change.path
    why = path_problem(path)
    if why:
        return [why]
    problems = []
    denial = gate.denial(path) or gate.shared_denial(path, new=change.status == "A")
    if denial:
        problems.append(denial)
    if change.new_mode == SYMLINK_MODE:
        problems.append("a symlink (a change writes regular files only)")
    elif change.new_mode == SUBMODULE_MODE or change.old_mode == SUBMODULE_MODE:
        problems.append("a submodule (a change writes regular files only)")
    if change.old_mode == SYMLINK_MODE:
        problems.append("a symlink the base tracks (nothing is written or deleted through a link)")
    parents = ["/".join(path.split("/")[:n]) for n in range(1, path.count("/") + 1)]
    for parent in parents:
        if parent in links:
            problems.append(f"under {parent}, a symlink the base tracks (nothing is written or deleted through it)")
            break
    if counts.get(path) is None or (new is not None and b"\0" in new[:BINARY_PROBE_BYTES]):
        problems.append("a binary file (the gate refuses binary files)")
    elif path.endswith(ENTITY_SUFFIXES):
        old = None if change.status == "A" else git("cat-file", "blob", f"{base_sha}:{path}", cwd=clone)
        problems.extend(measurement_moves(path, old, new))
    return problems


def measurement_moves(path: str, old: bytes | None, new: bytes | None) -> list[str]:
    """How a change of markdown entity file ``path`` moves its measurement blocks (empty when it keeps them).

    Compares, per block, the raw text of every top-level ``key:`` entry of the
    frontmatter (the key line and the indented lines under it), and the value
    the YAML parser reads for it (so a flow-style or merged key cannot slip a
    block past the text comparison). A block added or removed counts.
    """
    before_text = _text(old)
    after_text = _text(new)
    before, after = raw_blocks(before_text, path=path), raw_blocks(after_text, path=path)
    before_data, _ = _parsed(before_text, path)
    after_data, after_error = _parsed(after_text, path)
    if after_error and before_text is not None and any(before.get(key) for key in MEASUREMENT_BLOCKS):
        return [f"its frontmatter no longer parses ({after_error}), so its measurement blocks cannot be read"]
    moves = []
    for key in MEASUREMENT_BLOCKS:
        raw_before, raw_after = before.get(key, []), after.get(key, [])
        moved = raw_before != raw_after or (
            before_data is not None and after_data is not None and before_data.get(key) != after_data.get(key)
        )
        if not moved:
            continue
        if not raw_before and raw_after:
            how = "adds"
        elif raw_before and not raw_after and (after_data is None or key not in after_data):
            how = "removes"
        else:
            how = "changes"
        moves.append(f"{how} its {key}: block (a measurement block must stay byte-identical)")
    return moves


def raw_blocks(text: str | None, *, path: str) -> dict[str, list[str]]:
    """The frontmatter's top-level entries as raw text, by key: the key line and every indented line under it."""
    if text is None:
        return {}
    try:
        block, _, _ = split(text, path=path)
    except FrontmatterError:
        # An unclosed frontmatter: every line after the opening fence is read as the block.
        block = text.split("\n", 1)[1] if "\n" in text else ""
    if block is None:
        return {}
    blocks: dict[str, list[str]] = {}
    key: str | None = None
    lines: list[str] = []

    def close() -> None:
        if key is not None:
            blocks.setdefault(key, []).append("".join(lines).rstrip(" \t\r\n"))

    for line in block.splitlines(keepends=True):
        continues = line[:1] in (" ", "\t") or not line.strip() or (line.startswith("-") and not line.startswith("---"))
        if continues and key is not None:
            lines.append(line)
            continue
        if continues:
            continue
        close()
        match = _TOP_KEY.match(line)
        key, lines = (match.group(2), [line]) if match else (None, [])
    close()
    return blocks


def _text(content: bytes | None) -> str | None:
    return None if content is None else content.decode("utf-8", errors="surrogateescape")


def _parsed(text: str | None, path: str) -> tuple[dict[str, Any] | None, str]:
    """The frontmatter as data (None when absent text or unparsable) and the parse error, if any."""
    if text is None:
        return {}, ""
    try:
        data, _ = parse(text, path=path)
    except FrontmatterError as exc:
        return None, str(exc)
    return data, ""


def _changes(clone: Path, base_sha: str) -> list[Change]:
    """The staged tree's changes against ``base_sha`` (renames split into a deletion and an addition)."""
    out = git("diff", "--cached", "--raw", "-z", "--no-renames", "--no-abbrev", base_sha, cwd=clone)
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    changes = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(":"):
            continue
        old_mode, new_mode, _old, _new, status = meta[1:].split(" ")
        changes.append(Change(path=path, status=status[:1], old_mode=old_mode, new_mode=new_mode))
    return changes


def _numstat(clone: Path, base_sha: str) -> dict[str, tuple[int, int] | None]:
    """Added and removed lines per changed path (None for a file git reads as binary)."""
    out = git("diff", "--cached", "--numstat", "-z", "--no-renames", base_sha, cwd=clone)
    counts: dict[str, tuple[int, int] | None] = {}
    for record in out.decode("utf-8", errors="surrogateescape").split("\0"):
        if not record:
            continue
        added, removed, path = record.split("\t", 2)
        counts[path] = None if added == "-" else (int(added), int(removed))
    return counts


def _tracked_links(clone: Path, base_sha: str) -> set[str]:
    """Every path the base commit tracks as a symlink."""
    out = git("ls-tree", "-r", "-z", base_sha, cwd=clone)
    links = set()
    for record in out.decode("utf-8", errors="surrogateescape").split("\0"):
        if record.startswith(SYMLINK_MODE + " "):
            links.add(record.split("\t", 1)[1])
    return links


def verify_digests(clone: Path, record: GateRecord) -> None:
    """Raise GateRefused naming every gated path whose content (staged, or on disk) no longer matches its digest.

    What is committed is the index; a write to the tree after the gate read
    it fails the apply too, rather than landing either version silently.
    """
    problems = []
    for path, digest in record["digests"].items():
        try:
            staged: bytes | None = git("cat-file", "blob", f":{path}", cwd=clone)
        except GitError:
            staged = None  # no longer in the index: reads as deleted
        on_disk = clone / path
        written = on_disk.read_bytes() if on_disk.is_file() and not on_disk.is_symlink() else None
        for content, where in ((staged, "staged"), (written, "in the tree")):
            now = None if content is None else hashlib.sha256(content).hexdigest()
            if now != digest:
                problems.append((path, f"changed after the gate read it ({where})"))
                break
    if problems:
        raise GateRefused(_message("the tree moved after the gate", problems), _paths(problems))


def _message(head: str, problems: list[tuple[str, str]]) -> str:
    return head + ":\n" + "\n".join(f"- {path}: {why}" for path, why in problems)


def _paths(problems: list[tuple[str, str]]) -> list[str]:
    return _dedupe(path for path, _ in problems)


def _dedupe(paths: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for path in paths:
        seen.setdefault(path, None)
    return list(seen)
