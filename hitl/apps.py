from django.apps import AppConfig


class HitlConfig(AppConfig):
    name = "hitl"
    verbose_name = "People in the loop: cards, notices, Telegram"
