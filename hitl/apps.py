from django.apps import AppConfig


class HitlConfig(AppConfig):
    name = "hitl"
    verbose_name = "People in the loop: cards, notices, Telegram"

    def ready(self) -> None:
        from hitl.prometheus import cards
        from singularity.ops import metrics

        metrics.register("hitl.cards", cards)

        from hitl.channels import register_channel
        from hitl.channels.telegram import TelegramSession

        register_channel("telegram", TelegramSession)

        # The actions enqueue the sender by its name (singularity.queue): importing the tasks registers it.
        import hitl.tasks  # noqa: F401
