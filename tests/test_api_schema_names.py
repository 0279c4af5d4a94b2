"""The OpenAPI schema names each response shape once (issue 14: the API keeps its own schema).

drf-spectacular names a component after its serializer's class; two classes
of one name collide, and one shape silently describes the other's responses
(``Change`` described the cycle read's file changes with the backtest's
``{key, op, value}``, which the property tests found as a 200 that did not
match its schema). Every component name must belong to one serializer.
"""

from __future__ import annotations

from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator


def test_no_two_serializers_share_a_component_name():
    GENERATOR_STATS.reset()
    with GENERATOR_STATS.silence():
        SchemaGenerator().get_schema(request=None, public=True)
    collisions = [w for w in GENERATOR_STATS._warn_cache if "components with identical names" in w]
    assert collisions == []
