"""Real Ray client code (verl's single controller and its own tests, slime's placement-group flow) runs here with
``import ray`` resolving to runtime.ray_compat (:func:`runtime.ray_compat.as_ray.install_as_ray`), unchanged.

Installed at collection, before any test module imports ``ray``; actor processes get it through ``PYTHONPATH``.
"""

from __future__ import annotations

from runtime.ray_compat.as_ray import install_as_ray

install_as_ray()
