from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "singularity.notify"
    label = "notify"
    verbose_name = "Outbound notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from singularity.notify import tasks  # noqa: F401 - registers the task names enqueue() sends
        from singularity.notify.events import forget
        from singularity.notify.models import Destination

        post_save.connect(forget, sender=Destination, dispatch_uid="notify.forget.save")
        post_delete.connect(forget, sender=Destination, dispatch_uid="notify.forget.delete")
