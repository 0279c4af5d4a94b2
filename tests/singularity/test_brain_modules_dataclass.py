"""Brain code imports as a module would: a dataclass in a loop module or pipeline works."""

from __future__ import annotations

from singularity.brain.modules import module_from_source


def test_a_brain_module_may_declare_a_dataclass():
    source = b"from dataclasses import dataclass\n\n@dataclass\nclass Point:\n    x: int\n\nORIGIN = Point(0)\n"
    module, _ = module_from_source("features/x/x.loop.py", source)
    assert module.ORIGIN.x == 0


def test_the_engines_future_flags_do_not_leak_into_brain_code():
    module, _ = module_from_source("features/y/y.loop.py", b"def f(a: int) -> int:\n    return a\n")
    assert module.f.__annotations__ == {"a": int, "return": int}  # evaluated, not strings
