from django.apps import AppConfig


class SingularityConfig(AppConfig):
    name = "singularity"
    verbose_name = "Singularity beings"
