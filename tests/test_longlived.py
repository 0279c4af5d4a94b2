"""singularity.longlived: the collector paused for a batch is left as it was found, whatever the batch does."""

from __future__ import annotations

import gc

import pytest

from singularity.longlived import collector_paused


def test_a_paused_collector_comes_back_on_even_when_the_batch_fails_and_stays_off_when_it_was():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the batch failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
