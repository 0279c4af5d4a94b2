"""The API fields whose values are data, not field names: never camelized (issue 36, ``singularity.apikit.camel``).

A module of its own, with no import, so settings can read it.
"""

#: Fields whose values are data, passed verbatim in and out (their own name is still camelized).
DATA_FIELDS = (
    # metric names as keys, and the numbers graded on them
    "metrics",
    "per_metric",
    "incumbent_score",
    "people",
    # judge outputs and who judged
    "judge",
    "criteria",
    # spans: OpenTelemetry's own spelling (spanId, gen_ai.usage.input_tokens) kept as sent
    "trace",
    "attributes",
    # free-form JSON a user or a model sent, and a being's own stores
    "input",
    "output",
    "arguments",
    "tool_calls",
    "data",
    "learnings",
    "memories",
    "rules",
    "recent_actions",
    # cards: a form's answers keyed by its field names, its buttons
    "values",
    "answer",
    "options",
    # settings blocks: dotted paths and their values; an entity's resolved terms and where each came from
    "value",
    "expect",
    "from",
    "to",
    "terms",
    "provenance",
    # stored records returned verbatim (a window, a verdict, a gate's record, a check)
    "window",
    "frozen",
    "verdict",
    "gate",
    "check_verdict",
    "confounded_by",
    "confounded_by_edit",
    "check",
    "watch",
    "progress",
    "meter",
    "awaiting_person",
    # file paths and diffs, refusal reasons and pairs as counted
    "files",
    "pairs",
    "refusals",
    "really_refused",
    "not_reproducible",
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


#: What the library is told to leave alone: each data field in both spellings, since some serializers of the
#: seed's reads declare theirs camelCase already (``perMetric``, ``awaitingPerson``) and are rendered as declared.
IGNORED = tuple(dict.fromkeys([*DATA_FIELDS, *map(_camel, DATA_FIELDS)]))
