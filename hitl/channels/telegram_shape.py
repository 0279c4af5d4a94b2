"""Whether a Telegram update can be used at all: its id, the text in it, and the shape of what we read.

Telegram redelivers an update until it is answered 200, so an update we cannot
use must be answered (and ignored), never fail: a 500 would come back
forever. ``problem`` says in words what makes an update unusable: an
``update_id`` no column holds, text no database holds or nesting past the
bound (``singularity.json_input``), or a field we read (a chat, a sender, the
message replied to, …) of the wrong type.
"""

from __future__ import annotations

from typing import Any

from singularity import json_input
from singularity.json_input import KIND_NAMES, kind_name, value_at

INT64 = 2**63
#: Each field a handler reads, by its dotted place, and the JSON types it may have (absent or null is fine).
SHAPE: dict[str, tuple[type, ...]] = {
    "callback_query": (dict,),
    "callback_query.id": (str, int),
    "callback_query.data": (str,),
    "callback_query.from": (dict,),
    "callback_query.from.id": (int,),
    "callback_query.from.is_bot": (bool,),
    "callback_query.message": (dict,),
    "message": (dict,),
    "message.message_id": (int,),
    "message.text": (str,),
    "message.chat": (dict,),
    "message.chat.id": (int, str),
    "message.chat.type": (str,),
    "message.from": (dict,),
    "message.from.id": (int,),
    "message.from.is_bot": (bool,),
    "message.from.first_name": (str,),
    "message.from.username": (str,),
    "message.reply_to_message": (dict,),
    "message.reply_to_message.message_id": (int,),
}


def problem(update: Any) -> str:
    """Why ``update`` cannot be used, in words naming the field; "" when it can."""
    if not isinstance(update, dict):
        return f"body: expected an object, got {kind_name(update)}"
    update_id = update.get("update_id")
    if isinstance(update_id, bool) or not isinstance(update_id, int):
        return "update_id: missing, or not an integer"
    if not 0 <= update_id < INT64:
        return f"update_id: {update_id} is not an update id (0 to 2^63-1)"
    try:
        json_input.check(update)
    except json_input.JsonRefused as exc:
        return str(exc)
    for place, types in SHAPE.items():
        value = value_at(update, place)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            return f"{place}: expected {' or '.join(KIND_NAMES[t] for t in types)}, got {kind_name(value)}"
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
            return f"{place}: {value} is outside -2^63..2^63-1"
    return ""
