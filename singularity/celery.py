"""The Celery application. Tasks are thin wrappers over actions; the database decides who works."""

import logging
import os

from celery import Celery, signals

from singularity import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "singularity.settings")
broker.register()
if os.environ.get("LOG_FORMAT") == "json":
    # Python's warnings (Celery's own among them) as log records, so they come out as JSON lines too.
    logging.captureWarnings(True)

app = Celery("singularity")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_ready.connect
def _start_pulse(sender: object, **_: object) -> None:
    """Once a worker is ready, write its pulse for each queue it consumes (the readiness probe reads them)."""
    from singularity.pulse import start_worker_pulse

    queues = sorted(sender.app.amqp.queues.consume_from or sender.app.amqp.queues)  # type: ignore[attr-defined]
    start_worker_pulse(sender.hostname, queues)  # type: ignore[attr-defined]


#: A task → the log context field its first argument is (singularity.ops.context): the id in hand while it runs.
_TASK_IDS = {
    "singularity.tasks.run_being_cycle": "being_id",
    "grading.tasks.grading.grade_execution": "run_id",  # a grade's key is its run's id
}
_task_tokens: dict[str, list] = {}  # type: ignore[type-arg]


@signals.task_prerun.connect
def _bind_task_ids(task_id: str, task: object, args: tuple = (), **_: object) -> None:  # type: ignore[type-arg]
    """Give a task's log records its task id, and the run or being id it works on."""
    from singularity.ops import context

    ids: dict[str, object] = {"task_id": task_id}
    field = _TASK_IDS.get(getattr(task, "name", ""))
    if field and args:
        ids[field] = args[0]
    _task_tokens[task_id] = context.set_ids(**ids)


@signals.task_postrun.connect
def _unbind_task_ids(task_id: str, **_: object) -> None:
    from singularity.ops import context

    tokens = _task_tokens.pop(task_id, None)
    if tokens:
        context.reset(tokens)
