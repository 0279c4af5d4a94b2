from django.apps import AppConfig


class SingularityConfig(AppConfig):
    name = "singularity"
    verbose_name = "Singularity beings"

    def ready(self) -> None:
        from singularity import pgtime

        pgtime.connect()
