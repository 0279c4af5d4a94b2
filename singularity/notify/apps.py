from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "singularity.notify"
    label = "notify"
    verbose_name = "Outbound notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from singularity.notify import tasks  # noqa: F401 - registers the task names enqueue() sends
