"""Actor classes for the typed-surface tests (importable by dotted path in the actor processes).

Shaped after the checks in miles' ``miles/utils/workers/rpc/common/metadata.py`` (radixark/miles): static and class
methods are not exposed, a public function must take ``self``, ``@method`` options are found through wrappers,
and parameters and results are validated against their annotations.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from pydantic import Field
from typing_extensions import NotRequired

from runtime import method


class Job(TypedDict):
    name: str
    size: int
    tags: NotRequired[list[str]]


def _wrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A well-behaved decorator: functools.wraps carries the @method options along."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return wrapper


def _wrapped_keeping_only_wrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that records ``__wrapped__`` but copies no attributes: the options are found through it."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return functools.update_wrapper(wrapper, fn, updated=())


def _hiding(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator without functools.wraps: the @method options of ``fn`` are invisible on the wrapper."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return wrapper


class Typed:
    concurrency_groups = {"io": 1}

    def __init__(self) -> None:
        self.calls = 0

    def count(self) -> int:
        return self.calls

    def positive(self, n: Annotated[int, Field(ge=1)]) -> int:
        self.calls += 1
        return n

    def job_size(self, job: Job) -> int:
        self.calls += 1
        return job["size"] + len(job.get("tags", []))

    def maybe_jobs(self, jobs: list[Job] | None = None) -> int:
        return len(jobs or [])

    def identity(self, n: int) -> int:
        return n

    def wrong_return(self, value: Any) -> int:
        return value

    async def async_wrong_return(self, value: Any) -> list[int]:
        return value

    def non_negative(self, n: int) -> Annotated[int, Field(ge=0)]:
        return n

    def job_back(self, job: dict[str, Any]) -> Job:
        return job  # type: ignore[return-value]

    def says_none(self) -> None:
        return 5  # type: ignore[return-value]  # ``-> None`` is not checked

    def unannotated(self):
        return "anything"

    def anything(self) -> Any:
        return {"any": 1}

    @staticmethod
    def helper(n: int) -> int:
        return n + 1

    @classmethod
    def build(cls) -> str:
        return cls.__name__

    @_wrapped
    @method(concurrency_group="io")
    def lane_kept(self) -> str:
        return threading.current_thread().name

    @_wrapped_keeping_only_wrapped
    @method(concurrency_group="io")
    def lane_found(self) -> str:
        return threading.current_thread().name


def _no_self() -> int:
    return 1


class NoSelf:
    """A plain function assigned on the class: it takes no ``self``."""

    def __init__(self) -> None:
        pass

    helper = _no_self

    def fine(self) -> int:
        return 1


def _receiver_named_otherwise(n: int) -> int:
    return n


class WrongReceiver:
    """A function whose first parameter would receive the instance."""

    def __init__(self) -> None:
        pass

    double = _receiver_named_otherwise


class HiddenLane:
    """``@method`` options under a decorator that hides them: would run on the default lane."""

    concurrency_groups = {"io": 1}

    def __init__(self) -> None:
        pass

    @_hiding
    @method(concurrency_group="io")
    def save(self, path: str) -> str:
        return path


class ShadowsHandle:
    """Methods named as a handle's own attributes: ``handle.pid`` is the process id, never a call to ``pid``."""

    def info(self) -> str:
        return "info"

    def pid(self) -> int:
        return 0

    def work(self) -> int:
        return 1
