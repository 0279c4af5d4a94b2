"""Create a local admin user with a generated password if there is no superuser yet; print it once."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the local 'admin' superuser with a generated password if no superuser exists."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("An admin user already exists; leaving it alone.")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser("admin", "admin@localhost", password)
        self.stdout.write(self.style.SUCCESS(f"Created user 'admin' with password: {password}"))
        self.stdout.write("This password is shown once. Change it in the admin (/admin/) if you like.")
