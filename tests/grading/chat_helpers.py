"""Chat roles for the chat-episode tests: a role row with resolved terms, a person, and one message said."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from grading.chat.episodes import Counterpart, say
from grading.models import Entity, Turn
from singularity.brain.terms import resolve_terms
from singularity.tools import ToolCatalogue

BODY = "You answer customers of the shop."


def make_role(
    slug: str = "helpdesk",
    *,
    body: str = BODY,
    evaluation: dict[str, Any] | None = None,
    chat: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    **frontmatter: Any,
) -> Entity:
    """A chat role as the brain sync writes it (grading on, a ceiling of 50 episodes a day unless said)."""
    data: dict[str, Any] = {"name": slug.title(), **frontmatter}
    data["evaluation"] = {"enabled": True, "sample": {"maxPerDay": 50}, **(evaluation or {})}
    if chat is not None:
        data["chat"] = chat
    path = f"features/support/{slug}/{slug}.agent.md"
    terms, provenance = resolve_terms("role", manifest or {}, data, entity_label=path)
    return Entity.objects.create(
        slug=slug,
        kind=Entity.Kind.ROLE,
        target_kind=Entity.TargetKind.ROLE,
        path=path,
        name=data["name"],
        body=body,
        frontmatter=data,
        terms=terms,
        provenance=provenance,
        evaluation_enabled=terms["evaluation"]["enabled"],
        loop_enabled=terms["loop"]["enabled"],
    )


def usage(prompt: int = 100, completion: int = 10) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def said(fake_gateway, role: Entity, person: Any, text: str, *, surface: str = "dashboard") -> Turn:
    """Say ``text`` to ``role`` as ``person`` (a user, or a Counterpart) through the fake gateway; return the reply."""
    counterpart = person if isinstance(person, Counterpart) else Counterpart(user=person)
    return say(role, counterpart, text, surface, gateway=fake_gateway.gateway(), catalogue=ToolCatalogue(()))


def prices(settings) -> None:
    settings.BRAMA_INPUT_PRICE_USD_PER_MILLION = Decimal("3")
    settings.BRAMA_OUTPUT_PRICE_USD_PER_MILLION = Decimal("15")
    settings.SINGULARITY_INSTANCE_USD_PER_HOUR = Decimal("0")
    settings.BRAMA_MODEL = "test-model"
