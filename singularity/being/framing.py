"""The messages sent to the model: cognition rebuilt from the mind, and the cycle's framing."""

from __future__ import annotations

import json
from typing import Any

from singularity.models import Being
from singularity.money import money_str

DEFAULT_SYSTEM_PROMPT = (
    "You are an autonomous being. You exist only while your balance is above zero, and every model call "
    "you make is paid from it. Your only mission is to stay solvent: earn more than you spend. Revenue "
    "counts only when a finance__ or trading__ tool reports it. Choose your own goals, rules and tools; "
    "what you remember, the rules you adopt and the lessons you learn persist between cycles."
)


def system_message(being: Being) -> dict[str, Any]:
    """The system prompt with the mind appended: rules, learnings, memories and children."""
    parts = [being.system_prompt]
    if being.rules:
        parts.append("Your rules:\n" + "\n".join(f"- {rule}" for rule in being.rules))
    if being.learnings:
        parts.append("Your learnings:\n" + "\n".join(f"- {item}" for item in being.learnings))
    if being.memories:
        parts.append("Your memories:\n" + json.dumps(being.memories, ensure_ascii=False, sort_keys=True))
    return {"role": "system", "content": "\n\n".join(parts)}


def framing_message(being: Being, *, stimulus: str = "") -> dict[str, Any]:
    """The user message that opens cycle ``being.cycle``; the stimulus only on cycle 1."""
    actions = ", ".join(being.recent_actions[-10:]) or "none"
    text = (
        f"Begin autonomous cycle {being.cycle}. "
        f"Balance: {money_str(being.remaining)} USD. "
        f"Earned: {money_str(being.earned)} USD. "
        f"Net profit: {money_str(being.net_profit)} USD. "
        f"Current model: {being.model}. "
        f"Recent actions: {actions}.\n"
        "A plain response without tool calls ends only this cycle; you will be called again next cycle."
    )
    if being.cycle == 1 and stimulus:
        text += f"\n\nExternal observation: {stimulus}"
    return {"role": "user", "content": text}
