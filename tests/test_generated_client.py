"""A client generated from ``/api/schema/`` with ``openapi-python-client``, used as generated (issue 36).

The schema is written by ``manage.py spectacular``, the client generated into a temporary package, and driven
over real HTTP against the live server: it reports runs, reads the loop, answers a card, and a bad token is a
typed 401 (the project's ``Error``), never the generator's ``UnexpectedStatus``. Every request body an
operation needs is required in the schema, so the generated function will not send none.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from singularity.models import ApiToken
from tests.grading.grading_helpers import make_entity
from tests.hitl.helpers import make_card, recording_handler

PACKAGE = "singularity_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> object:
    """The generated client package, imported (generated once for the module)."""
    binary = Path(sys.executable).with_name("openapi-python-client")
    if not binary.exists():
        pytest.fail("openapi-python-client is a dev dependency (requirements-dev.txt): install it")
    where = tmp_path_factory.mktemp("client")
    schema = where / "schema.yaml"
    call_command("spectacular", "--file", str(schema), "--validate", "--fail-on-warn")
    env = {"PATH": f"{binary.parent}:/usr/bin:/bin"}  # its formatter (ruff) is found beside it
    subprocess.run(
        [str(binary), "generate", "--path", str(schema), "--meta", "none", "--output-path", str(where / PACKAGE)],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))
        for name in [m for m in sys.modules if m.startswith(PACKAGE)]:
            del sys.modules[name]
        shutil.rmtree(where, ignore_errors=True)


def _client(generated, live_server, token: str):
    return generated.AuthenticatedClient(base_url=live_server.url, token=token, raise_on_unexpected_status=True)


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_reports_runs_reads_the_loop_and_answers_a_card(generated, live_server, alice):
    from singularity_generated_client.api.cards import cards_answer_create
    from singularity_generated_client.api.loop import loop_status
    from singularity_generated_client.api.runs import runs_report
    from singularity_generated_client.models import Answer, Card, LoopStatus, ReportedRun, ReportedRuns
    from singularity_generated_client.models.reported_run_status_enum import ReportedRunStatusEnum

    entity = make_entity("triage", loop={"enabled": True})
    _, token = ApiToken.issue(alice, "script")
    client = _client(generated, live_server, token)
    now = timezone.now()
    run = ReportedRun(
        entity=f"{entity.target_kind}:{entity.slug}",
        status=ReportedRunStatusEnum.SUCCEEDED,
        started_at=now - timedelta(seconds=3),
        completed_at=now,
        cost_usd="0.0042",
    )
    reported = runs_report.sync(client=client, body=run)
    assert isinstance(reported, ReportedRuns), reported
    status = loop_status.sync(client=client)
    assert isinstance(status, LoopStatus) and [e.target_id for e in status.entities] == ["triage"]
    with recording_handler():
        card = make_card()
        answered = cards_answer_create.sync(card.id, client=client, body=Answer(choice="accept"))
    assert isinstance(answered, Card) and answered.status.value == "answered", answered


@pytest.mark.django_db(transaction=True)
def test_a_bad_token_is_a_typed_401_on_every_call(generated, live_server):
    from singularity_generated_client.api.loop import loop_status
    from singularity_generated_client.api.runs import runs_list
    from singularity_generated_client.models import Error

    client = _client(generated, live_server, "not-a-token")
    for call in (loop_status.sync_detailed, runs_list.sync_detailed):
        response = call(client=client)
        assert response.status_code == 401 and isinstance(response.parsed, Error), response
        assert response.parsed.error == "authentication_failed" and response.parsed.detail


def test_every_body_an_operation_needs_is_required_in_the_schema():
    from drf_spectacular.generators import SchemaGenerator

    from singularity.apikit.schema import OPTIONAL_BODIES

    schema = SchemaGenerator().get_schema(request=None, public=True)
    optional = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            needed = (method, path) not in OPTIONAL_BODIES
            if method in ("post", "put", "patch") and body is not None and needed and not body.get("required"):
                optional.append(f"{method.upper()} {path}")
    assert optional == [], optional
    assert schema["paths"]["/api/loop/hold/"]["post"]["requestBody"]["required"]  # and a hold's reason:
    assert "reason" in schema["components"]["schemas"]["HoldRequest"]["required"]


@pytest.mark.django_db
def test_a_query_parameter_an_operation_does_not_document_is_refused_naming_it(alice):
    from rest_framework.test import APIClient

    _, token = ApiToken.issue(alice, "script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.get("/api/runs/?offsett=2")
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith("offsett: not a parameter of GET /api/runs/ (it takes ")
    assert client.get("/api/loop/history/?bogus=x").json()["detail"].startswith("bogus: not a parameter")
    assert client.get("/api/runs/?limit=5").status_code == 200  # documented: taken
