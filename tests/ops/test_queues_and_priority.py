"""Grading, the loop and the beings on queues of their own; ``up`` starts a worker per queue, at a lower scheduling
priority than the web."""

from __future__ import annotations

import os
import sys
import time

from singularity.celery import app
from singularity.management.commands.up import commands_for
from singularity.queues import QUEUES
from singularity.supervise import Supervisor


def queue_of(task: str) -> str:
    route = app.amqp.router.route({}, task)
    return route["queue"].name


def test_grading_the_loop_and_the_beings_each_have_their_queue():
    assert queue_of("grading.tasks.grading.grade_execution") == "grading"
    assert queue_of("evolution.tasks.tick") == "loop"
    assert queue_of("evolution.tasks.analyse_round") == "loop"
    assert queue_of("singularity.tasks.run_being_cycle") == "beings"
    assert queue_of("singularity.tasks.wake_beings") == "beings"
    # The sweeps and the rest: the default queue, so a grading backlog never holds them up.
    assert queue_of("grading.tasks.grading.sweep_lost") == "celery"
    assert queue_of("hitl.tasks.send_deliveries") == "celery"
    # Each queue is bound by its own routing key: a message reaches one queue, not all four.
    keys = {q.name: q.routing_key for q in app.conf.task_queues}
    assert keys == {queue: queue for queue in QUEUES}


def test_up_starts_a_worker_per_queue_with_concurrency_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORKER_CONCURRENCY", "3")
    monkeypatch.setenv("WORKER_CONCURRENCY_GRADING", "8")
    commands = commands_for("python", "127.0.0.1", 8000, dev=False)
    assert set(commands) == {"web", "beat", *(f"worker-{q}" for q in QUEUES)}
    for queue in QUEUES:
        command = commands[f"worker-{queue}"]
        assert command[command.index("-Q") + 1] == queue
        assert command[command.index("-n") + 1] == f"{queue}@%h"
        assert command[command.index("--concurrency") + 1] == ("8" if queue == "grading" else "3")
    assert commands["web"][2] == "gunicorn"
    assert commands_for("python", "127.0.0.1", 8000, dev=True)["web"][2] == "runserver"


def test_the_supervisor_starts_background_processes_at_a_lower_priority():
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    supervisor = Supervisor({"web": sleep, "worker": sleep}, restart=frozenset({"worker"}), niceness={"worker": 7})
    supervisor.start()
    try:
        time.sleep(0.5)
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        web = os.getpriority(os.PRIO_PROCESS, supervisor.children["web"].process.pid)
        worker = os.getpriority(os.PRIO_PROCESS, supervisor.children["worker"].process.pid)
        assert web == ours and worker == min(19, ours + 7)
    finally:
        supervisor.stop(grace=5)
