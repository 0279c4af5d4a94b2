"""The project's Celery app stays the current one for the whole test session.

A test module that builds a Celery app of its own (the embedded broker's stress sender and worker) must not make
it current: the shared tasks the loop and grading enqueue (``grades_landed``, ``grade_execution``) resolve to the
current app, and on another app their messages go to a queue nobody reads (no cycle ever opens).
"""

from celery import current_app

import tests.fakes.broker_worker  # noqa: F401 - imported as the stress test imports it


def test_the_project_app_is_still_the_current_app():
    from singularity.celery import app

    assert current_app.main == app.main, f"the current Celery app is {current_app.main!r}"
