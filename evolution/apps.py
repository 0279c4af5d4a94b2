from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evolution"
    verbose_name = "Evolution: cycles, rounds, pull requests, lessons"

    def ready(self) -> None:
        from evolution import hooks

        hooks.connect()
