"""The README's API section says what the schema says (issue 36): its paths exist, its spellings are the schema's,
and its `POST /api/runs/report/` example is accepted as written, with no word of deprecation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import time_machine
from drf_spectacular.generators import SchemaGenerator

from tests.evolution.settings_helpers import client_for
from tests.grading.runs_helpers import make_entity

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
#: Paths under /api/ the README names that are not operations of the API: the schema and docs pages, Flower's.
NOT_OPERATIONS = {"/api/", "/api/docs/", "/api/schema/", "/api/tasks", "/api/v3"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def shape(path: str) -> str:
    """A path with each parameter, ``<name>`` or ``{name}``, as ``{}``."""
    return re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path)


def test_every_api_path_the_readme_names_is_in_the_schema(schema):
    named = {m.group(0).rstrip(".,;:)`") for m in re.finditer(r"/api/[A-Za-z0-9_/<>{}.-]*", README)}
    known = {shape(path) for path in schema["paths"]}
    missing = sorted(p for p in named if p not in NOT_OPERATIONS and shape(p.split("?")[0]) not in known)
    assert not missing, f"the README names paths the schema does not have: {missing}"


def test_the_spellings_the_readme_shows_are_the_schemas(schema):
    text = json.dumps(schema)
    section = README[README.index("- **REST API**") : README.index("## Production")]
    for name in ("targetKind", "targetId", "costUsd", "nextCursor", "results"):
        assert name in section and f'"{name}"' in text, name
    parameters = {
        p["name"] for ops in schema["paths"].values() for op in ops.values() for p in op.get("parameters", [])
    }
    for query in re.findall(r"`\?([A-Za-z]+)=", section):
        if query in ("offset",):  # named as refused
            assert query not in parameters
        elif query not in ("run_id",):  # the old spelling, named as deprecated
            assert query in parameters, f"?{query}= is in the README but no operation takes it"


@pytest.mark.django_db
def test_the_readme_runs_report_example_is_accepted_as_written(alice):
    block = README[README.index("3. **`POST /api/runs/report/`**") :]
    body = json.loads(re.search(r"-d '(\{.*?\})'\n", block, re.S).group(1).replace("…", "x"))
    make_entity("triage")
    with time_machine.travel("2026-03-01T12:00:00Z", tick=False):
        answer = client_for(alice).post("/api/runs/report/", body, format="json")
    assert answer.status_code == 201, answer.json()
    assert "Deprecation" not in answer.headers and "Warning" not in answer.headers
