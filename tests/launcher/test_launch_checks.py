"""Checks before anything starts (launcher/config/launch_checks.py): the job's entrypoint and every actor class are
imported
with the job's code on sys.path, and each pool's kwargs are matched against the constructor, every error at once."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import PYTHON, subprocess_env

from launcher.config.hosts_config import load_config
from launcher.config.launch_checks import check_launch
from launcher.errors import ConfigError

ACTORS = """
from typing import Annotated
from pydantic import BaseModel, ConfigDict, Field, field_validator

class Optim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-3
    weight_decay: float = 0.0

class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optim: Optim = Optim()
    model_path: str = "/m"

    @field_validator("model_path")
    @classmethod
    def _exists(cls, value: str) -> str:
        raise ValueError(f"{value}/config.json not found")  # a check of the GPU host's files

class Learner:
    def __init__(self, *, lr: float, steps: Annotated[int, Field(ge=1)] = 10, name: str = "x", rank: int = 0) -> None:
        pass

class Configured:
    def __init__(self, *, settings: Settings) -> None:
        pass

class Positional:
    def __init__(self, lr):
        pass
"""


@pytest.fixture(autouse=True)
def clean_imports() -> Iterator[None]:
    """The checks import the user's modules into this process: forget them (and the path) after each test."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def write(tmp_path: Path, pools: str, job: str = 'entrypoint = "userjob:main"') -> Path:
    (tmp_path / "useractors.py").write_text(ACTORS)
    (tmp_path / "userjob.py").write_text("def main(ctx):\n    return 0\n")
    path = tmp_path / "hosts.toml"
    path.write_text(
        f'[[hosts]]\nname = "h"\naddress = "localhost"\nprovider = "local"\nworkdir = "w"\n\n[job]\n{job}\n\n{pools}'
    )
    return path


def pool(pool_id: str, actor_class: str, kwargs: str = "", extra: str = "") -> str:
    return (
        f'[[pools]]\nid = "{pool_id}"\n[pools.worker]\nkind = "serve"\nactor_class = "{actor_class}"\n{extra}\n'
        f"[pools.worker.kwargs]\n{kwargs}\n\n"
    )


def problems(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        check_launch(load_config(path))
    return str(err.value)


def test_a_class_and_job_in_the_working_dir_pass(tmp_path: Path) -> None:
    path = write(tmp_path, pool("a", "useractors:Learner", "lr = 0.1\nsteps = 3"))
    result = check_launch(load_config(path))
    assert result.warnings == [] and [p.field for p in result.packages] == ["job.working_dir"]


def test_every_error_at_once_with_pool_field_line_and_fix(tmp_path: Path) -> None:
    pools = (
        pool("typo", "useractors:Learner", "lr = 0.1\nsteps_ = 3")
        + pool("missing", "useractors:Learner", "steps = 3")
        + pool("types", "useractors:Learner", 'lr = "fast"\nsteps = 0')
        + pool("cls", "useractors:Lerner")
        + pool("mod", "nosuchmodule:Learner")
        + pool("pos", "useractors:Positional")
        + pool("plan", "useractors:Learner", "lr = 1.0", extra='plan_kwargs = ["rank", "world_size"]')
    )
    message = problems(write(tmp_path, pools, job='entrypoint = "userjob:mian"'))
    assert "9 problem(s) found before starting anything" in message
    assert (
        "hosts.toml:18: pool 'typo' field worker.kwargs: Learner.__init__ takes no 'steps_'; did you mean 'steps'?"
        in message
    )
    assert "pool 'missing' field worker.kwargs: Learner.__init__ needs 'lr' (no default); add `lr = ...`" in message
    assert "pool 'types' field worker.kwargs.lr: 'fast' is not a float (Learner.__init__ takes lr: float)" in message
    assert (
        "pool 'types' field worker.kwargs.steps: Input should be greater than or equal to 1 (Learner.__init__ "
        "takes steps: int)" in message
    )
    assert "pool 'cls' field worker.actor_class 'useractors:Lerner': useractors" in message
    assert "has no 'Lerner'; did you mean 'Learner'?" in message
    assert "cannot import 'nosuchmodule'" in message and "[job] working_dir" in message
    assert "constructor parameter 'lr' is positional or keyword; actor constructors must be keyword-only" in message
    assert "pool 'plan' field worker.plan_kwargs: Learner.__init__ takes no 'world_size'" in message
    assert "job.entrypoint 'userjob:mian': userjob" in message and "did you mean 'main'?" in message


def test_dict_kwargs_are_validated_as_the_model_the_hint_names(tmp_path: Path) -> None:
    """runtime.core.metadata.coerce_constructor_kwargs makes the model on the host; here its own errors are errors, and
    its validators' (which may read the host's files) are warnings."""
    bad = pool("c", "useractors:Configured", 'settings = { optim = { lr = "x", weight_decy = 0.1 } }')
    message = problems(write(tmp_path, bad))
    assert "pool 'c' field worker.kwargs.settings.optim.lr: Input should be a valid number" in message
    assert "settings.optim.weight_decy: Extra inputs are not permitted; did you mean 'weight_decay'?" in message
    good = pool("c", "useractors:Configured", 'settings = { model_path = "/models/q" }')
    result = check_launch(load_config(write(tmp_path, good)))
    assert result.warnings == [
        "pool 'c' field worker.kwargs.settings.model_path: /models/q/config.json not found (here; checked again on "
        "the host)"
    ]


def test_a_module_that_raises_shows_the_users_frame(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    (tmp_path / "userjob.py").write_text("import os\n\nraise RuntimeError('bad config at import')\n")
    message = problems(path)
    assert "job.entrypoint 'userjob:main': importing userjob raised RuntimeError: bad config at import" in message
    assert f'File "{tmp_path / "userjob.py"}", line 3' in message
    assert "importlib" not in message


def test_a_dependency_missing_here_is_a_warning_not_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, pool("g", "gpuactors:Engine"))
    (tmp_path / "gpuactors.py").write_text("import sglang_only_on_gpu_hosts\n\nclass Engine:\n    pass\n")
    (warning,) = check_launch(load_config(path)).warnings
    assert "needs 'sglang_only_on_gpu_hosts', which is not installed" in warning


@pytest.mark.processes
def test_dry_run_checks_classes_and_shows_the_code(tmp_path: Path) -> None:
    path = write(tmp_path, pool("a", "useractors:Learner", "lr = 0.1\nsteps_ = 3"))
    argv = [PYTHON, "-m", "launcher.console.cli", str(path), "--dry-run"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=subprocess_env(), cwd="/")
    assert result.returncode == 2, result.stderr
    assert "[miles-launch] error:" in result.stderr and "did you mean 'steps'?" in result.stderr
    path.write_text(path.read_text().replace("steps_", "steps"))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=subprocess_env(), cwd="/")
    assert result.returncode == 0, result.stderr
    assert f"job.working_dir: {tmp_path} (" in result.stdout
    assert "used in place (every host is local)" in result.stdout
    assert "checked: the job's entrypoint and every actor class imported" in result.stdout


def test_a_class_without_a_constructor_takes_no_kwargs_and_the_job_needs_its_imports_here(tmp_path: Path) -> None:
    path = write(tmp_path, pool("n", "useractors:Plain", "lr = 0.1"))
    (tmp_path / "useractors.py").write_text("class Plain:\n    pass\n")
    (tmp_path / "userjob.py").write_text("import only_on_gpu_hosts\n\ndef main(ctx):\n    return 0\n")
    message = problems(path)
    assert "pool 'n' field worker.kwargs: Plain.__init__ takes no 'lr'; its parameters: none" in message
    assert "job.entrypoint 'userjob:main': importing userjob needs 'only_on_gpu_hosts'" in message  # runs here
