"""The demo being that ``make run`` starts when no gateway is configured."""

from __future__ import annotations

from singularity.being.actions import create_being, start_on_workers
from singularity.models import Being

DEMO_NAME = "demo"


def ensure_demo_being() -> Being | None:
    """Create the demo being and hand it to the workers, once; returns it when it was started now."""
    being = Being.objects.filter(name=DEMO_NAME).first()
    if being is None:
        being = create_being(DEMO_NAME, stimulus="You were just switched on in a demo. Look around.")
    if being.status in (Being.Status.CREATED, Being.Status.STOPPED) and being.solvent:
        return start_on_workers(being, by="make run")
    return None
