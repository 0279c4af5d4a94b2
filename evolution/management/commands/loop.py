"""``manage.py loop analyze <kind>:<id>`` — the loop from a shell (Analyze now, the loop's clock)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from grading.models import Entity


def find_entity(name: str) -> Entity:
    """The entity named ``<kind>:<id>`` or just ``<id>``; CommandError naming what matched."""
    kind, _, slug = name.rpartition(":")
    entities = Entity.objects.filter(slug=slug, present=True)
    if kind:
        entities = entities.filter(target_kind=kind)
    found = list(entities)
    if not found:
        raise CommandError(f"{name}: no such entity (name it <kind>:<id>, e.g. scenario:triage)")
    if len(found) > 1:
        kinds = ", ".join(f"{e.target_kind}:{e.slug}" for e in found)
        raise CommandError(f"{name} names {len(found)} entities ({kinds}): add the kind")
    return found[0]


class Command(BaseCommand):
    help = "Run the self-evolving loop from a shell: analyze an entity now, or run the loop's clock once."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        analyze = sub.add_parser("analyze", help="Open a cycle on request (Analyze now).")
        analyze.add_argument("entity", help="<kind>:<id>, e.g. scenario:triage")
        sub.add_parser("tick", help="Poll pull requests, close overdue watches, recover lost rounds, once.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "analyze":
            from evolution.loop.trigger import analyze_now

            entity = find_entity(options["entity"])
            result = analyze_now(entity)
            if not result.opened:
                raise CommandError(f"{entity}: no cycle opened: {result.reason}")
            self.stdout.write(f"cycle {result.cycle.pk} opened for {entity}")
        else:
            from evolution.tasks import tick

            self.stdout.write(str(tick()))
