"""Real Ray client code (verl's single controller and its own tests, slime's placement-group flow) runs here with
``import ray`` resolving to runtime.ray_compat (:func:`runtime.ray_compat.as_ray.install_as_ray`), unchanged.

Installed at collection, before any test module imports ``ray``; actor processes get it through ``PYTHONPATH``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.ray_compat.as_ray import install_as_ray

install_as_ray()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs real client code over actor processes; verl's own files stay unchanged, so they are
    marked here rather than by a ``pytestmark`` of their own."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.processes)
