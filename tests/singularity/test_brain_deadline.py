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
        seen["connection"] = theirs.connection  # held, so its address is not reused by the next connection
        return theirs

    theirs = deadline.call(reads, path="c.loop.py", name="measure", seconds=5)
    connection.ensure_connection()
    assert seen["connection"] is not connection.connection
    assert theirs.connection is None  # closed at the end of the call


def test_bounded_wraps_a_function_and_leaves_an_async_one_for_the_caller_to_refuse(settings):
    settings.BRAIN_CODE_DEADLINE_SECS = 0.1

    async def window(ctx):
        return ctx

    assert deadline.bounded(window, path="d.loop.py") is window
    wrapped = deadline.bounded(lambda: time.sleep(2), path="d.loop.py", name="compare")
    with pytest.raises(BrainDeadline, match=r"^d.loop.py: compare\(\) did not answer within 0.1 s$"):
        wrapped()


def test_a_batch_runs_every_call_in_order_in_one_thread_each_answer_or_error_its_own():
    threads = set()

    def measure(n):
        threads.add(threading.get_ident())
        if n == 2:
            raise ValueError("two is odd here")
        return n * 10

    answers = deadline.call_each(measure, [(0,), (1,), (2,), (3,)], path="e.loop.py", name="measure", seconds=5)
    assert [value for value, _ in answers] == [0, 10, None, 30]
    errors = [error for _, error in answers]
    assert errors[:2] == [None, None] and errors[3] is None
    assert isinstance(errors[2], ValueError) and str(errors[2]) == "two is odd here"
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert deadline.call_each(measure, [], path="e.loop.py", name="measure") == []


def test_a_batch_call_past_its_deadline_is_abandoned_and_the_rest_are_refused_unstarted():
    release, started = threading.Event(), []

    def measure(n):
        started.append(n)
        if n == 1:
            release.wait(10)
        return n

    began = time.monotonic()
    answers = deadline.call_each(measure, [(0,), (1,), (2,), (3,)], path="f.loop.py", name="measure", seconds=0.2)
    assert time.monotonic() - began < 2  # one deadline waited out, not one a call
    assert answers[0] == (0, None)
    assert str(answers[1][1]) == "f.loop.py: measure() did not answer within 0.2 s"
    assert all("still running" in str(error) for _, error in answers[2:])
    assert deadline.still_running() >= 1
    refused = deadline.call_each(measure, [(5,)], path="f.loop.py", name="measure", seconds=5)
    assert "still running" in str(refused[0][1])
    release.set()
    for _ in range(100):
        if deadline.still_running() == 0:
            break
        time.sleep(0.02)
    assert started == [0, 1]  # the calls after the hung one never ran, even once it ended


@pytest.mark.django_db(transaction=True)
def test_a_batchs_thread_has_its_own_connection_closed_after_its_last_call():
    def reads(n):
        from django.db import connections

        theirs = connections["default"]
        with theirs.cursor() as cursor:
            cursor.execute("SELECT 1")
        return theirs

    answers = deadline.call_each(reads, [(1,), (2,)], path="g.loop.py", name="measure", seconds=5)
    theirs = answers[-1][0]
    assert answers[0][0] is theirs and theirs is not connection
    assert theirs.connection is None
