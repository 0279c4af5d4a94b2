from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evolution"
    verbose_name = "Evolution: cycles, rounds, pull requests, lessons"

    def ready(self) -> None:
        from evolution.prometheus import cycles
        from singularity.ops import metrics

        metrics.register("evolution.cycles", cycles)

        from django.db.models.signals import post_migrate, pre_migrate

        from evolution import hooks
        from evolution.investigate import views_sql

        _check_project_functions()
        hooks.connect()
        # The proposer's read-only views: dropped before every migrate, made again after it (views_sql says why).
        pre_migrate.connect(views_sql.before_migrate, sender=self, dispatch_uid="evolution-ro-views-drop")
        post_migrate.connect(views_sql.after_migrate, sender=self, dispatch_uid="evolution-ro-views-make")


def _check_project_functions() -> None:
    """Fail at boot when a project-tier setting (LOOP_SHOULD_OPEN, LOOP_COMPARE, LOOP_WINDOW, LOOP_VERDICT,
    LOOP_MEASURE) names nothing importable (a config error, named)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    from singularity.errors import ConfigError

    for name in ("LOOP_SHOULD_OPEN", "LOOP_COMPARE", "LOOP_WINDOW", "LOOP_VERDICT", "LOOP_MEASURE"):
        path = getattr(settings, name, "")
        if not path:
            continue
        try:
            function = import_string(path)
        except ImportError as exc:
            raise ConfigError(f"{name}: {path!r} cannot be imported: {exc}") from None
        if not callable(function):
            raise ConfigError(f"{name}: {path!r} is not callable")
