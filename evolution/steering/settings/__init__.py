"""Loop-settings writes (seed 003, "loop_set", "loop_widen", "loop_join"): the verbs the pages, the API and agents call.

The package by topic: ``base`` (what a write may name, the refusal, an
edit, the answer), ``yaml_edits`` (the round trip), ``oversight`` (what a
write reaches and the widenings it makes), ``lock``, ``write`` (stage,
validate, push, sync, record), ``writes`` (the three verbs), ``loosening``
(what loosens spend, the check or the watch), ``widen_card`` and ``reads``. What callers use is named here.
"""

from evolution.steering.settings.base import (
    APPROVE,
    CONFLICT,
    DECLINE,
    INVALID,
    NOT_FOUND,
    OP_JOIN,
    OP_SET,
    OP_WIDEN,
    PRECONDITION,
    PRODUCER,
    REFUSED,
    REMOVE,
    SET,
    TOO_MANY,
    Answer,
    SettingsRefusal,
    target_named,
)
from evolution.steering.settings.lock import settings_lock
from evolution.steering.settings.reads import actions, policy_path, widens_family
from evolution.steering.settings.write import MANIFEST_PATH, digest
from evolution.steering.settings.writes import loop_join, loop_set, loop_widen, on_widen_card

__all__ = [
    "APPROVE",
    "CONFLICT",
    "DECLINE",
    "INVALID",
    "MANIFEST_PATH",
    "NOT_FOUND",
    "OP_JOIN",
    "OP_SET",
    "OP_WIDEN",
    "PRECONDITION",
    "PRODUCER",
    "REFUSED",
    "REMOVE",
    "SET",
    "TOO_MANY",
    "Answer",
    "SettingsRefusal",
    "actions",
    "digest",
    "loop_join",
    "loop_set",
    "loop_widen",
    "on_widen_card",
    "policy_path",
    "settings_lock",
    "target_named",
    "widens_family",
]
