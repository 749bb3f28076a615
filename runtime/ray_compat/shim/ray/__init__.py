"""``import ray`` in a process with runtime/ray_compat/shim first on PYTHONPATH: it becomes runtime.ray_compat.

Put there by :func:`runtime.ray_compat.as_ray.install_as_ray` (or by hand: ``PYTHONPATH=$(python -m
runtime.ray_compat.as_ray)``), so that actor processes importing Ray code get the same module as their driver.
"""

import sys

from runtime.ray_compat.as_ray import install_as_ray

sys.modules[__name__] = install_as_ray()
