from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from singularity.models import Being


@login_required
def being_list(request: HttpRequest) -> HttpResponse:
    return render(request, "beings/list.html", {"beings": Being.objects.all()})


@login_required
def being_detail(request: HttpRequest, name: str) -> HttpResponse:
    being = get_object_or_404(Being, name=name)
    return render(request, "beings/detail.html", {"being": being})
