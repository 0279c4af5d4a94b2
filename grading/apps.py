from django.apps import AppConfig


class GradingConfig(AppConfig):
    name = "grading"
    verbose_name = "Grading: entities, executions, grades"

    def ready(self) -> None:
        from grading.cards import KIND, PRODUCER, on_rating_card
        from hitl import registry

        registry.register(PRODUCER, KIND, on_rating_card)
