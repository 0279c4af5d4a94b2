"""eval_write_method (seed 003, "Overriding the prompts"; R2.28, R2.29): a judge method file written through the
brain's git, validated as the load reads it, swapped against the sha eval_get_method answered.

The name none is reserved (it grades with no judge); a file the load would refuse — not UTF-8, a frontmatter that
does not parse, no ``# Run Evaluation`` heading — is refused naming what is wrong and where.
"""

from __future__ import annotations

from evolution.steering.brain_files import FileAnswer, write_file
from evolution.steering.settings.base import INVALID, SettingsRefusal
from grading.methods import NAME, method_path
from singularity.brain.loader import DEFAULT_METHOD_FILE, method_file

OP = "eval_write_method"


def name_refusal(name: str) -> str:
    """Why ``name`` cannot name a method file ("" when it can)."""
    if name == "none":
        return "the method name none is reserved: it grades with no judge at all"
    if not NAME.match(name):
        return f"{name!r} is not a method name (letters, digits, - and _, starting with a letter or digit)"
    return ""


def write_method(name: str, content: str, *, sha: str | None, actor: str, dry_run: bool) -> FileAnswer:
    """Write ``constitution/Evaluation/Methods/<name>.md`` (or, dry run, only validate it); SettingsRefusal naming why."""
    why = name_refusal(name)
    if why:
        raise SettingsRefusal(INVALID, why)
    path = method_path(name)
    raw = content.encode("utf-8", "surrogatepass")  # a lone surrogate is refused as not UTF-8, naming the file

    def check(data: bytes | None) -> None:
        error = method_file(name, data or b"", path=path).error
        if error:
            raise SettingsRefusal(INVALID, error)

    fallback = DEFAULT_METHOD_FILE.read_bytes() if name == "default" else None
    return write_file(
        path, raw, expect=sha, fallback=fallback, check=check, actor=actor, op=OP, subject=path, dry_run=dry_run
    )
