"""file_read and file_list over the brain at one commit, confined (R8.18): git reads, never the working tree."""

from __future__ import annotations

import fnmatch
from typing import Any

from evolution.loop.proposer import path_problem
from singularity.brain.git import GitError

#: The most bytes one file_read hands back (the rest is cut and said so).
MAX_READ_BYTES = 60_000
#: The most paths one file_list hands back.
MAX_LISTED = 400

#: Names that hold secrets: never read, never listed.
SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_ed25519*",
    "*secret*",
    "*credential*",
    "*.token",
    ".netrc",
    ".npmrc",
    ".pypirc",
)


def refusal(path: str) -> str | None:
    """Why the proposer may not read ``path`` (a plain brain-relative path), or None when it may."""
    problem = path_problem(path)
    if problem:
        return f"{path!r} {problem}; only files inside the brain can be read"
    lowered = path.lower()
    if lowered == "constitution/evaluation" or lowered.startswith("constitution/evaluation/"):
        return "constitution/Evaluation/** is the judge's: the proposer may not read it (read ban)"
    name = lowered.rsplit("/", 1)[-1]
    if name.endswith(".loop.py"):
        return "loop modules (*.loop.py) measure the entity: the proposer may not read them (read ban)"
    if lowered.startswith(".git/") or "/.git/" in lowered:
        return "git's own files are not the brain's"
    if any(fnmatch.fnmatch(name, pattern) for pattern in SECRET_PATTERNS):
        return "this file may hold secrets: the proposer may not read it"
    return None


def _folder(path: Any) -> tuple[str, str | None]:
    """The folder prefix to list ("" for the root) and the problem with ``path``, if any."""
    if path in (None, "", ".", "/"):
        return "", None
    if not isinstance(path, str):
        return "", "path: a folder of the brain, as text"
    folder = path.strip().strip("/")
    problem = path_problem(folder)
    if problem:
        return "", f"{path!r} {problem}; only folders inside the brain can be listed"
    return folder + "/", None


def file_list(checkout: Any, commit: str, path: Any = "") -> dict[str, Any]:
    """The files under folder ``path`` at ``commit`` with their sizes; what the read ban hides is counted, not named."""
    prefix, problem = _folder(path)
    if problem:
        return {"refused": problem}
    try:
        tree = checkout.tree_at(commit)
    except GitError as exc:
        return {"error": f"the brain at {commit[:12]} cannot be listed: {exc}"}
    files = []
    hidden = 0
    for name, entry in sorted(tree.items()):
        if not name.startswith(prefix):
            continue
        if refusal(name) or entry.is_symlink:
            hidden += 1
            continue
        files.append({"path": name, "bytes": entry.size})
    answer: dict[str, Any] = {"commit": commit, "folder": prefix or "/", "files": files[:MAX_LISTED]}
    if len(files) > MAX_LISTED:
        answer["cut"] = f"{len(files) - MAX_LISTED} more not shown; list a folder further down"
    if hidden:
        answer["hidden"] = f"{hidden} file(s) the proposer may not read (the judge's, loop modules, secrets)"
    return answer


def file_read(checkout: Any, commit: str, path: Any) -> dict[str, Any]:
    """The text of ``path`` at ``commit`` (cut at MAX_READ_BYTES), or the refusal saying why not."""
    if not isinstance(path, str) or not path.strip():
        return {"refused": "path: the file's path inside the brain, as text"}
    refused = refusal(path)
    if refused:
        return {"refused": refused}
    try:
        entry = checkout.tree_at(commit).get(path)
    except GitError as exc:
        return {"error": f"the brain at {commit[:12]} cannot be read: {exc}"}
    if entry is None:
        return {"error": f"{path}: no such file at {commit[:12]} (file_list shows what there is)"}
    if entry.is_symlink:
        return {"refused": f"{path} is a symbolic link; only plain files inside the brain can be read"}
    data = checkout.read_at(commit, path)
    if b"\0" in data[:8000]:
        return {"refused": f"{path} is a binary file ({len(data)} bytes)"}
    answer: dict[str, Any] = {"path": path, "commit": commit, "bytes": len(data)}
    answer["content"] = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_READ_BYTES:
        answer["cut"] = f"only the first {MAX_READ_BYTES} of {len(data)} bytes"
    return answer
