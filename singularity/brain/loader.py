"""Read the whole brain at one commit: the manifest, every entity file, the judge's method files.

Everything is read from the tree of ``commit`` through the checkout (never
from the working directory), so a snapshot is exactly what that commit says.
A broken entity carries its own ``error`` and never takes the others down; a
MANIFEST.yaml that does not load is a brain-wide error (and then no entity's
terms resolve, since every one of them reads it). A file that is a symlink, or
larger than ``frontmatter.MAX_FILE_BYTES``, is never read: it is the error of
the entity (or method, or manifest) it belongs to.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from singularity.brain import frontmatter
from singularity.brain.git import Checkout, TreeEntry
from singularity.brain.terms import MANIFEST_LABEL, TermsError, check_manifest, resolve_terms
from singularity.errors import ConfigError
from singularity.notify import manifest as notify_manifest

MANIFEST_PATH = MANIFEST_LABEL
METHODS_DIR = "constitution/Evaluation/Methods"
METHOD_HEADING = "# Run Evaluation"
DEFAULT_METHOD_FILE = Path(__file__).with_name("default_method.md")
FEATURES_DIR = "features/"
#: File suffix → (target kind, entity kind before the pipeline check).
ENTITY_SUFFIXES = {
    ".scenario.md": ("scenario", "workflow"),
    ".heartbeat.md": ("heartbeat", "heartbeat"),
    ".agent.md": ("role", "role"),
}
SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
MAX_SLUG = 100
_LOOP_BLOCK = re.compile(r"^(evaluation|loop)\s*:", re.MULTILINE)


@dataclass
class MethodFile:
    """A judge method: ``source`` is "brain" (the brain's own), "engine-customised" (the brain's default.md) or "engine"."""

    name: str
    path: str
    text: str
    sha256: str
    source: str = "brain"
    frontmatter: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class EntityDefinition:
    slug: str
    kind: str
    target_kind: str
    path: str
    name: str = ""
    description: str = ""
    schedule: str = ""
    frontmatter: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    definition_hash: str = ""
    pipeline_path: str = ""
    loop_module_path: str = ""
    loop_module_hash: str = ""
    terms: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class BrainSnapshot:
    commit: str
    manifest: dict[str, Any] = field(default_factory=dict)
    entities: list[EntityDefinition] = field(default_factory=list)
    methods: dict[str, MethodFile] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def entity(self, target_kind: str, slug: str) -> EntityDefinition | None:
        """The entity with that identity, or None."""
        return next((e for e in self.entities if e.target_kind == target_kind and e.slug == slug), None)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_brain(checkout: Checkout, commit: str) -> BrainSnapshot:
    """Return the snapshot of the brain at ``commit``: manifest, entities (each with terms or an error), methods."""
    present = checkout.tree_at(commit)
    files = list(present)
    snapshot = BrainSnapshot(commit=commit)
    manifest_ok = _load_manifest(checkout, commit, present, snapshot)
    snapshot.methods = _load_methods(checkout, commit, present)
    seen: dict[tuple[str, str], str] = {}
    for path in sorted(files):
        found = _entity_suffix(path)
        if found is None:
            continue
        suffix, (target_kind, kind) = found
        slug = PurePosixPath(path).name[: -len(suffix)]
        if len(slug) > MAX_SLUG:
            snapshot.errors.append(f"{path}: the entity id is longer than {MAX_SLUG} characters; it is not loaded")
            continue
        if (target_kind, slug) in seen:
            snapshot.errors.append(
                f"{path}: {target_kind} id {slug!r} is already defined by {seen[target_kind, slug]}; this file is ignored"
            )
            continue
        entity = _load_entity(checkout, commit, present, path, slug, target_kind, kind, snapshot.manifest, manifest_ok)
        if entity is None:
            continue
        seen[target_kind, slug] = path
        snapshot.entities.append(entity)
    return snapshot


def unreadable(path: str, entry: TreeEntry | None) -> str:
    """Why the brain file ``path`` is not read (a symlink, or over the size bound); "" when it may be read."""
    if entry is None:
        return ""
    if entry.is_symlink:
        return f"{path}: a symlink; a brain file must be a regular file, it is not read"
    if entry.size > frontmatter.MAX_FILE_BYTES:
        return (
            f"{path}: {entry.size} bytes is over the {frontmatter.MAX_FILE_BYTES}-byte bound on a brain file; "
            "it is not read"
        )
    return ""


def _entity_suffix(path: str) -> tuple[str, tuple[str, str]] | None:
    if not path.startswith(FEATURES_DIR):
        return None
    for suffix, kinds in ENTITY_SUFFIXES.items():
        if path.endswith(suffix) and len(PurePosixPath(path).name) > len(suffix):
            return suffix, kinds
    return None


def _load_manifest(checkout: Checkout, commit: str, present: Mapping[str, TreeEntry], snapshot: BrainSnapshot) -> bool:
    """Fill ``snapshot.manifest``; return whether it loaded (its refusals go to ``snapshot.errors``)."""
    if MANIFEST_PATH not in present:
        return True
    if refused := unreadable(MANIFEST_PATH, present[MANIFEST_PATH]):
        snapshot.errors.append(refused)
        return False
    try:
        text = checkout.read_at(commit, MANIFEST_PATH).decode("utf-8")
        data = frontmatter.parse_yaml(text, path=MANIFEST_PATH)
    except UnicodeDecodeError:
        snapshot.errors.append(f"{MANIFEST_PATH}: not UTF-8 text")
        return False
    except ConfigError as exc:
        snapshot.errors.append(str(exc))
        return False
    if data is None:
        return True
    if not isinstance(data, dict):
        snapshot.errors.append(f"{MANIFEST_PATH}: must be a mapping of keys")
        return False
    snapshot.manifest = data
    refusals = check_manifest(data) + notify_manifest.refusals(data)
    snapshot.errors.extend(refusals)
    return not refusals


def load_methods(checkout: Checkout, commit: str) -> dict[str, MethodFile]:
    """The judge methods at ``commit`` alone, as ``load_brain`` reads them (no entity is loaded)."""
    return _load_methods(checkout, commit, checkout.tree_at(commit))


def _load_methods(checkout: Checkout, commit: str, files: Mapping[str, TreeEntry]) -> dict[str, MethodFile]:
    methods: dict[str, MethodFile] = {}
    prefix = METHODS_DIR + "/"
    for path in sorted(files):
        if not path.startswith(prefix) or "/" in path[len(prefix) :] or not path.endswith(".md"):
            continue
        name = PurePosixPath(path).stem
        source = "engine-customised" if name == "default" else "brain"
        if refused := unreadable(path, files[path]):
            methods[name] = MethodFile(name=name, path=path, text="", sha256="", source=source, error=refused)
            continue
        raw = checkout.read_at(commit, path)
        method = MethodFile(name=name, path=path, text="", sha256=sha256(raw), source=source)
        method.error = _method_error(method, raw)
        methods[name] = method
    if "default" not in methods:
        raw = DEFAULT_METHOD_FILE.read_bytes()
        path = f"engine:{DEFAULT_METHOD_FILE.name}"
        method = MethodFile(name="default", path=path, text="", sha256=sha256(raw), source="engine")
        method.error = _method_error(method, raw)
        methods["default"] = method
    return methods


def method_file(name: str, raw: bytes, *, path: str | None = None) -> MethodFile:
    """``raw`` read as the method ``name`` would be at load, with ``error`` saying what is wrong and where ("" when it
    loads): what eval_write_method validates a write by, so a write never makes a method the load refuses."""
    path = path or f"{METHODS_DIR}/{name}.md"
    source = "engine-customised" if name == "default" else "brain"
    method = MethodFile(name=name, path=path, text="", sha256=sha256(raw), source=source)
    method.error = _method_error(method, raw)
    return method


def _method_error(method: MethodFile, raw: bytes) -> str:
    """Fill the method's text and frontmatter; return why it does not load ("" when it does)."""
    try:
        method.text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{method.path}: not UTF-8 text"
    if method.name == "none":
        return f"{method.path}: the method name none is reserved: it grades with no judge at all"
    try:
        method.frontmatter, body = frontmatter.parse(method.text, path=method.path)
    except ConfigError as exc:
        return str(exc)
    if not any(line.strip() == METHOD_HEADING for line in body.splitlines()):
        return f"{method.path}: a method file must contain the heading {METHOD_HEADING!r}"
    return ""


def _load_entity(
    checkout: Checkout,
    commit: str,
    present: Mapping[str, TreeEntry],
    path: str,
    slug: str,
    target_kind: str,
    kind: str,
    manifest: dict[str, Any],
    manifest_ok: bool,
) -> EntityDefinition | None:
    """One entity file as a definition (with ``error`` when it does not load); None for a role outside the loop."""
    folder = str(PurePosixPath(path).parent)
    pipeline_path = f"{folder}/{slug}.pipeline.py" if target_kind == "scenario" else ""
    if pipeline_path and pipeline_path in present:
        kind = "pipeline"
    else:
        pipeline_path = ""
    loop_path = f"{folder}/{slug}.loop.py"
    entity = EntityDefinition(slug=slug, kind=kind, target_kind=target_kind, path=path, name=slug)
    entity.pipeline_path = pipeline_path
    entity.loop_module_path = loop_path if loop_path in present else ""
    for part in (path, pipeline_path, entity.loop_module_path):
        if part and (refused := unreadable(part, present[part])):
            entity.error = refused
            return entity
    raw = checkout.read_at(commit, path)
    digest = hashlib.sha256(raw)
    if pipeline_path:
        digest.update(checkout.read_at(commit, pipeline_path))
    entity.definition_hash = digest.hexdigest()
    if entity.loop_module_path:
        entity.loop_module_hash = sha256(checkout.read_at(commit, loop_path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        entity.error = f"{path}: not UTF-8 text"
        return entity
    try:
        data, body = frontmatter.parse(text, path=path)
    except ConfigError as exc:
        if target_kind == "role" and not _LOOP_BLOCK.search(text):
            return None
        entity.error = str(exc)
        entity.body = text
        return entity
    if target_kind == "role" and "evaluation" not in data and "loop" not in data:
        return None
    entity.frontmatter, entity.body = data, body
    problems = _definition_problems(entity, data)
    if not SLUG.match(slug):
        problems.insert(0, f"{path}: id: {slug!r} is not an entity id (letters, digits, _ and -)")
    if problems:
        entity.error = "\n".join(problems)
        return entity
    if not manifest_ok:
        entity.error = f"{path}: terms: {MANIFEST_PATH} does not load, so no terms resolve until it is fixed"
        return entity
    try:
        entity.terms, entity.provenance = resolve_terms(kind, manifest, data, entity_label=path)
    except TermsError as exc:
        entity.error = str(exc)
    return entity


def _definition_problems(entity: EntityDefinition, data: dict[str, Any]) -> list[str]:
    """Refusals of the entity's own keys (name, description, schedule, tasks), as "<path>: <key>: <why>" lines."""
    path, problems = entity.path, []
    for key in ("name", "description"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            problems.append(f"{path}: {key}: must be text, not {value!r}")
        elif key == "name":
            entity.name = value.strip() or entity.slug
        else:
            entity.description = value
    schedule = data.get("schedule")
    if schedule is None:
        if entity.kind == "heartbeat":
            problems.append(f"{path}: schedule: required — a heartbeat is its schedule (a 5-field cron)")
    elif not isinstance(schedule, str):
        problems.append(f"{path}: schedule: must be a 5-field cron text, not {schedule!r}")
    else:
        why = cron_why(schedule)
        if why:
            problems.append(f"{path}: schedule: {why}")
        else:
            entity.schedule = " ".join(schedule.split())
    if "tasks" in data:
        problems.extend(f"{path}: {line}" for line in _tasks_problems(entity, data["tasks"]))
    return problems


def _tasks_problems(entity: EntityDefinition, tasks: Any) -> list[str]:
    if entity.target_kind != "scenario":
        return ["tasks: only a scenario has tasks"]
    if not isinstance(tasks, list):
        return [f"tasks: must be a list of {{id, prompt}}, not {tasks!r}"]
    problems, ids = [], set()
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            problems.append(f"tasks.{index}: must be a mapping {{id, prompt}}, not {task!r}")
            continue
        task_id, prompt = task.get("id"), task.get("prompt")
        if not isinstance(task_id, str) or not task_id.strip():
            problems.append(f"tasks.{index}.id: required text")
        elif task_id in ids:
            problems.append(f"tasks.{index}.id: {task_id!r} appears twice")
        else:
            ids.add(task_id)
        if not isinstance(prompt, str) or not prompt.strip():
            problems.append(f"tasks.{index}.prompt: required text")
        for key in task:
            if key not in ("id", "prompt"):
                problems.append(f"tasks.{index}.{key}: unknown key; a task is {{id, prompt}}")
    return problems


_CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_CRON_NAMES = {
    3: {
        m: i + 1
        for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])
    },
    4: {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])},
}


def cron_why(expression: str) -> str | None:
    """Why ``expression`` is not a 5-field cron (minute hour day-of-month month day-of-week), or None."""
    fields = expression.split()
    if len(fields) != 5:
        return f"{expression!r} has {len(fields)} fields; a cron has 5 (minute hour day-of-month month day-of-week)"
    for index, (text, (label, low, high)) in enumerate(zip(fields, _CRON_FIELDS, strict=True)):
        for item in text.split(","):
            base, _, step = item.partition("/")
            if step and (not step.isdigit() or int(step) == 0):
                return f"{label} {text!r}: the step {step!r} is not a positive number"
            if base == "*":
                continue
            ends = base.split("-")
            if len(ends) > 2 or not all(ends):
                return f"{label} {text!r}: {item!r} is not a value, a range or */step"
            values = []
            for end in ends:
                value = _CRON_NAMES.get(index, {}).get(end.lower()) if not end.isdigit() else int(end)
                if value is None or not low <= value <= high:
                    return f"{label} {text!r}: {end!r} is outside {low}-{high}"
                values.append(value)
            if len(values) == 2 and values[0] > values[1]:
                return f"{label} {text!r}: the range {base!r} runs backwards"
    return None
