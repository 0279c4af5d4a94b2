"""Forms for the being pages. They validate only; the views call the actions."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from singularity.being.actions import validate_stimulus
from singularity.errors import ConfigError
from singularity.models import Being, being_name_validator
from singularity.money import QUANTUM, MoneyError, parse_money

#: A ceiling on a starting balance typed by hand; well inside what both databases hold exactly.
MAX_STARTING_USD = Decimal(1_000_000)


def clean_starting_usd(value: object) -> Decimal:
    """Return the starting balance as a Decimal; raise ValidationError unless it is 0 to 1,000,000 USD in ledger units."""
    try:
        amount = parse_money(value, what="starting balance", allow_negative=False)
    except MoneyError as exc:
        raise ValidationError(str(exc)) from None
    if amount > MAX_STARTING_USD:
        raise ValidationError(f"starting balance: at most {MAX_STARTING_USD} USD")
    if amount % QUANTUM:
        raise ValidationError("starting balance: at most 12 decimal places")
    return amount


def clean_being_name(name: str) -> str:
    """Return the name; raise ValidationError when it is malformed or taken."""
    being_name_validator(name)
    if Being.objects.filter(name=name).exists():
        raise ValidationError(f"A being named {name!r} already exists.")
    return name


def clean_stimulus(stimulus: str) -> str:
    """Return the stimulus; raise ValidationError when it is over 64 KiB or contains NUL."""
    try:
        return validate_stimulus(stimulus)
    except ConfigError as exc:
        raise ValidationError(str(exc).removeprefix("--stimulus: ")) from None


class BeingForm(forms.Form):
    name = forms.CharField(max_length=64)
    starting_usd = forms.CharField(label="Starting balance (USD)", max_length=40)
    stimulus = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, strip=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["starting_usd"].initial = str(settings.SINGULARITY_STARTING_BALANCE_USD)

    def clean_name(self) -> str:
        return clean_being_name(self.cleaned_data["name"])

    def clean_starting_usd(self) -> Decimal:
        return clean_starting_usd(self.cleaned_data["starting_usd"])

    def clean_stimulus(self) -> str:
        return clean_stimulus(self.cleaned_data["stimulus"])
