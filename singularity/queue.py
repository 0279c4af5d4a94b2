"""Enqueueing a Celery task by its registered name, so an action never imports the tasks module that wraps it.

A tasks module is a leaf: it imports the actions it wraps. An action that
wants work done on a worker names the task instead — its dotted path, the
name beat's schedule uses too. Each app imports its tasks in its
``AppConfig.ready``, so every process (web, worker, a management command)
knows the names.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from singularity.celery import app


def task_named(name: str) -> Task:
    """Return the Celery task registered as ``name``; ``NotRegistered`` (a KeyError naming it) when none is."""
    return app.tasks[name]


def enqueue(name: str, *args: Any) -> None:
    """Send the task ``name`` with ``args`` to a worker (run here when tasks are eager); BrokerError when it cannot."""
    task_named(name).delay(*args)
