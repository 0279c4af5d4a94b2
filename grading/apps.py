from django.apps import AppConfig


class GradingConfig(AppConfig):
    name = "grading"
    verbose_name = "Grading: entities, executions, grades"

    def ready(self) -> None:
        from grading.prometheus import grades, runs
        from singularity.ops import metrics

        metrics.register("grading.runs", runs)
        metrics.register("grading.grades", grades)

        from grading.cards import KIND, PRODUCER, rating_card_detail
        from grading.ratings import on_rating_card
        from hitl import registry

        registry.register(PRODUCER, KIND, on_rating_card)
        registry.register_detail(PRODUCER, KIND, rating_card_detail, replaces_text=True)

        from grading import rate_ask

        registry.register(rate_ask.PRODUCER, rate_ask.KIND, rate_ask.on_card)  # an agent's relayed rating
        registry.register_detail(rate_ask.PRODUCER, rate_ask.KIND, rating_card_detail)  # the run, below its text

        from grading.chat.telegram import on_message
        from hitl.channels.telegram import register_message_handler

        register_message_handler(on_message)

        from grading.sync import sync_before_up
        from singularity import startup

        startup.register("brain sync", sync_before_up)

        from grading import alert_measures

        alert_measures.connect()

        # Grading, the rating cards and the chat enqueue their tasks by name (singularity.queue): import them.
        import grading.tasks  # noqa: F401
