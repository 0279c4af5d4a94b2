"""Brain code under a deadline (singularity.brain.deadline): a thread the caller abandons, the timeout named."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from singularity.brain import deadline
from singularity.brain.deadline import BrainDeadline


def test_an_answer_within_the_deadline_is_returned_and_arguments_pass_through():
    assert deadline.call(lambda a, *, b: a + b, 2, b=3, path="x.loop.py", name="window", seconds=5) == 5


def test_what_the_function_raises_is_raised_unchanged():
    class Boom(Exception):
        pass

    def broken():
        raise Boom("boom")

    with pytest.raises(Boom, match="boom"):
        deadline.call(broken, path="x.loop.py", name="compare", seconds=5)


def test_a_hung_function_is_abandoned_at_its_deadline_with_the_file_and_function_named():
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(BrainDeadline) as late:
        deadline.call(release.wait, path="features/a/a.loop.py", name="window", seconds=0.2)
    waited = time.monotonic() - started
    assert str(late.value) == "features/a/a.loop.py: window() did not answer within 0.2 s"
    assert 0.2 <= waited < 2
    release.set()


def test_the_default_deadline_is_sixty_seconds(settings):
    del settings.BRAIN_CODE_DEADLINE_SECS
    assert deadline.deadline_seconds() == 60.0
    assert str(BrainDeadline("a.loop.py", "measure", 60.0)) == "a.loop.py: measure() did not answer within 60 s"


def test_a_function_still_hung_from_its_last_call_is_refused_at_once_until_that_call_ends():
    release = threading.Event()

    def hangs():
        release.wait(10)
        return "late"

    with pytest.raises(BrainDeadline):
        deadline.call(hangs, path="b.loop.py", name="should_open", seconds=0.1)
    started = time.monotonic()
    with pytest.raises(BrainDeadline, match="still running"):
        deadline.call(hangs, path="b.loop.py", name="should_open", seconds=5)
    assert time.monotonic() - started < 0.5  # no second deadline waited out
    assert deadline.still_running() >= 1
    release.set()
    for _ in range(100):
        if deadline.still_running() == 0:
            break
        time.sleep(0.02)
    assert deadline.call(hangs, path="b.loop.py", name="should_open", seconds=5) == "late"


@pytest.mark.django_db(transaction=True)
def test_the_thread_has_its_own_database_connection_closed_when_it_returns():
    seen = {}

    def reads():
        from django.db import connections

        theirs = connections["default"]
        with theirs.cursor() as cursor:
            cursor.execute("SELECT 1")
        seen["connection"] = id(theirs.connection)
        return theirs

    theirs = deadline.call(reads, path="c.loop.py", name="measure", seconds=5)
    connection.ensure_connection()
    assert seen["connection"] != id(connection.connection)
    assert theirs.connection is None  # closed at the end of the call


def test_bounded_wraps_a_function_and_leaves_an_async_one_for_the_caller_to_refuse(settings):
    settings.BRAIN_CODE_DEADLINE_SECS = 0.1

    async def window(ctx):
        return ctx

    assert deadline.bounded(window, path="d.loop.py") is window
    wrapped = deadline.bounded(lambda: time.sleep(2), path="d.loop.py", name="compare")
    with pytest.raises(BrainDeadline, match=r"^d.loop.py: compare\(\) did not answer within 0.1 s$"):
        wrapped()
