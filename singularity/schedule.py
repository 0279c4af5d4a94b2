"""Every periodic task, in one place, each with an expiry. Imported by settings: no Django imports here."""

from singularity.env import env_float

BEAT_SCHEDULE = {
    "sync-brain": {
        "task": "grading.tasks.brain.sync_brain",
        "schedule": env_float("BRAIN_SYNC_SECS", 60.0),
        "options": {"expires": env_float("BRAIN_SYNC_SECS", 60.0)},
    },
    "wake-beings": {
        "task": "singularity.tasks.wake_beings",
        "schedule": 2.0,
        "options": {"expires": 10},
    },
    "settle-reservations": {
        "task": "singularity.tasks.settle_reservations",
        "schedule": 60.0,
        "options": {"expires": 50},
    },
    "grading-sweep-due": {
        "task": "grading.tasks.grading.sweep_due",
        "schedule": 30.0,
        "options": {"expires": 25},
    },
    "drive-demo": {
        "task": "grading.tasks.drive_demo",
        "schedule": 20.0,
        "options": {"expires": 15},
    },
    "hitl-expire-cards": {
        "task": "hitl.tasks.expire_cards",
        "schedule": 30.0,
        "options": {"expires": 25},
    },
    "hitl-send-deliveries": {
        "task": "hitl.tasks.send_deliveries",
        "schedule": 30.0,
        "options": {"expires": 25},
    },
    "notify-sweep": {
        "task": "singularity.notify.tasks.sweep",
        "schedule": 30.0,
        "options": {"expires": 25},
    },
    "notify-evaluate-alerts": {
        "task": "singularity.notify.tasks.evaluate_alerts",
        "schedule": env_float("NOTIFY_ALERT_SECS", 60.0),
        "options": {"expires": env_float("NOTIFY_ALERT_SECS", 60.0)},
    },
    "chat-close-idle-episodes": {
        "task": "grading.tasks.chat.close_idle_episodes",
        "schedule": 60.0,
        "options": {"expires": 50},
    },
    "grading-open-missing-rating-cards": {
        "task": "grading.tasks.cards.open_missing_rating_cards",
        "schedule": 60.0,
        "options": {"expires": 50},
    },
    "grading-assemble-traces": {
        "task": "grading.tasks.grading.assemble_traces",
        "schedule": max(1.0, env_float("OTLP_GRACE_SECS", 5.0)),
        "options": {"expires": max(1.0, env_float("OTLP_GRACE_SECS", 5.0))},
    },
    "grading-sweep-lost": {
        "task": "grading.tasks.grading.sweep_lost",
        "schedule": 300.0,
        "options": {"expires": 240},
    },
    "loop-tick": {
        "task": "evolution.tasks.tick",
        "schedule": 30.0,
        "options": {"expires": 25},
    },
    "loop-sweep-lessons": {
        "task": "evolution.tasks.sweep_lessons",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
    "loop-hourly-sweep": {
        "task": "evolution.tasks.hourly_sweep",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
    "loop-needs-you-digest": {
        "task": "evolution.tasks.needs_you_digest",
        "schedule": 86400.0,
        "options": {"expires": 3600},
    },
}
