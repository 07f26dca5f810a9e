"""Django versions: the next releases' deprecations are errors in this suite, by name."""

from __future__ import annotations

import warnings

import django
import pytest
from django.utils import deprecation

from tests.conftest import DJANGO_DEPRECATIONS


@pytest.mark.parametrize("name", DJANGO_DEPRECATIONS)
def test_djangos_coming_deprecations_are_errors(name: str, request: pytest.FixtureRequest) -> None:
    category = getattr(deprecation, name, None)
    if category is None:
        pytest.skip(f"Django {django.get_version()} has no {name}")
    assert f"error::django.utils.deprecation.{name}" in request.config.getini("filterwarnings")
    with pytest.raises(category):
        warnings.warn("a deprecated Django API", category, stacklevel=1)


def test_on_django_5_2_both_are_named() -> None:
    if django.VERSION[:2] != (5, 2):
        pytest.skip(f"Django {django.get_version()}")
    assert all(hasattr(deprecation, name) for name in DJANGO_DEPRECATIONS)
