"""Every periodic task, in one place, each with an expiry. Imported by settings: no Django imports here."""

BEAT_SCHEDULE = {
    "wake-beings": {
        "task": "singularity.tasks.wake_beings",
        "schedule": 2.0,
        "options": {"expires": 10},
    },
}
