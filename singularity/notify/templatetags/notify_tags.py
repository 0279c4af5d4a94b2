from django import template

from singularity.notify.events import EVENTS

register = template.Library()


@register.filter
def event_words(event: str) -> str:
    """An event's name as people read it ("a card waits on a person")."""
    return EVENTS.get(event, event)
