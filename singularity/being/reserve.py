"""The worst case of one model call, reserved before it is made (issue 34, ``SINGULARITY_COST_RESERVATION``).

The reservation bounds the seed's debit from above: the prompt's tokens (at
most one per byte of the request's JSON: every tokenizer's token covers at
least one byte, and the JSON's quotes and keys outweigh a chat template's
markers) at the input price, plus ``max_tokens`` at the output price, plus
the instance price over the call's deadline (every attempt's timeout and the
waits between retries). A call whose reservation the balance cannot cover
is not made, so a gateway that keeps within these bounds cannot take the
balance below zero.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from singularity.agent import Prices
from singularity.money import Debit, debit_for

#: The longest wait between two attempts: the SDK's backoff is at most 8 s, a Retry-After at most 60 s.
RETRY_WAIT_SECS = 60
NS_PER_SEC = 1_000_000_000


def json_bytes(value: Any) -> int:
    """The UTF-8 bytes of ``value`` as JSON (the standard separators)."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


#: ``{"messages": `` … ``, "tools": `` … ``}``: what the two lists' JSON is wrapped in.
_WRAPPING = len('{"messages": ') + len(', "tools": ') + len("}")


def prompt_tokens_bound(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, tools_bytes: int | None = None
) -> int:
    """At most this many prompt tokens: the UTF-8 bytes of the messages and tools as JSON.

    ``tools_bytes`` is ``json_bytes(tools)`` when the caller has it already (a cycle's tools do not change while it
    runs, and their schemas are most of a short prompt); the result is the same either way.
    """
    tools_size = json_bytes(tools) if tools_bytes is None else tools_bytes
    return _WRAPPING + json_bytes(messages) + tools_size


def call_deadline_ns(timeout_secs: float | None = None, retries: int | None = None) -> int:
    """The longest one gateway call may take: every attempt's timeout and the waits between them."""
    timeout = settings.BRAMA_TIMEOUT_SECS if timeout_secs is None else timeout_secs
    retries = settings.BRAMA_MAX_RETRIES if retries is None else retries
    return int(timeout * NS_PER_SEC) * (retries + 1) + RETRY_WAIT_SECS * NS_PER_SEC * retries


def reservation(prices: Prices, *, prompt_tokens: int, max_tokens: int, deadline_ns: int) -> Debit:
    """The seed's debit formula applied to the worst case."""
    return debit_for(
        prompt_tokens=prompt_tokens,
        completion_tokens=max_tokens,
        elapsed_ns=deadline_ns,
        input_price_per_million=prices.input_per_million,
        output_price_per_million=prices.output_per_million,
        instance_usd_per_hour=prices.instance_per_hour,
    )
