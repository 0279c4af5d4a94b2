"""Flower, run against the Redis broker as the README says, lists the grading worker and the task it ran (issue 37).

A real ``celery worker`` and a real ``celery flower`` (the pinned ``flower`` of requirements-dev.txt), started in
subprocesses, reached over HTTP with the basic auth the README tells to set.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.db import connection

from singularity.celery import app as celery_app
from singularity.settings import BASE_DIR
from tests.ops.broker import URL, needs_redis
from tests.ops.server import free_port
from tests.ops.workers import grading_workers, judged_brain, worker_env

pytest.importorskip("flower", reason="flower is not installed (requirements-dev.txt pins it)")


def eventually(read, timeout: float = 90.0, what=lambda: "it"):
    """Call ``read`` until it returns something truthy (within ``timeout`` s); return that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = read()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"Flower never showed {what()}"
        time.sleep(1)


@needs_redis
@pytest.mark.django_db(transaction=True)
def test_flower_against_the_broker_lists_the_worker_and_its_task(redis_broker, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("needs Postgres: the worker process is handed the test database as a Postgres URL")
    env = worker_env(tmp_path / "var", URL, judged_brain(tmp_path), "http://127.0.0.1:9/v1")
    port = free_port()
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "singularity", f"--broker={URL}", "flower",
         "--address=127.0.0.1", f"--port={port}", "--basic-auth=ops:flower-password-37"],
        cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "flower.log").open("w"),
    )  # fmt: skip
    auth = ("ops", "flower-password-37")
    try:
        with grading_workers(env, ["flowerwatch"]) as (worker,), httpx.Client(timeout=10, auth=auth) as client:
            base = f"http://127.0.0.1:{port}"
            hostname = worker.hostname()
            # Nobody in without the password.
            assert eventually(lambda: client.get(f"{base}/workers", auth=None).status_code) == 401

            def listed():
                return [w for w in client.get(f"{base}/workers?json=1").json()["data"] if w["hostname"] == hostname]

            (shown,) = eventually(listed)
            assert shown["status"] is True  # alive
            grade_id = str(uuid.uuid4())  # no such booking: the worker answers False
            celery_app.send_task("grading.tasks.grading.grade_execution", args=[grade_id])

            seen: list[object] = []

            def the_task():
                tasks = client.get(f"{base}/api/tasks").json()
                seen[:] = [tasks]
                return [t for t in tasks.values() if grade_id in str(t.get("args")) and t["state"] == "SUCCESS"]

            (task,) = eventually(the_task, what=lambda: f"the task among {seen}")
            assert task["worker"] == hostname and task["name"] == "grading.tasks.grading.grade_execution"
    finally:
        flower.terminate()
        flower.wait(timeout=30)
