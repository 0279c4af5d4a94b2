from django.apps import AppConfig


class SingularityConfig(AppConfig):
    name = "singularity"
    verbose_name = "Singularity beings"

    def ready(self) -> None:
        from singularity import pgtime

        pgtime.connect()

        from django.core.signals import request_finished

        from singularity.ops import context

        # A request's ids end with it (the next request in this thread sets its own).
        request_finished.connect(context.clear, dispatch_uid="singularity.ops.context.clear")
