"""The recording handler of the test producer, for every hitl test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hitl.helpers import Recorder, recording_handler


@pytest.fixture
def handler() -> Iterator[Recorder]:
    """Yield the recorder registered for every kind of the test producer."""
    with recording_handler() as recorder:
        yield recorder
