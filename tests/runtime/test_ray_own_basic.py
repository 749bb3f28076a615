"""Ray's own tests/test_basic.py (dayshah/ray, a fork of ray-project/ray, at fbccb5d1; Apache-2.0), ported: the test
bodies keep Ray's calls; the fixture is one ray.init(num_cpus=4) for the module (ray_start_regular_shared, also
for Ray's ray_start_shared_local_modes and shutdown_only with ray.init(num_cpus=0/1)).

Ported: test_release_cpu_resources (its first part), test_not_release_resource, test_grpc_message_size,
test_submit_api (all but the GPU and infeasible parts), test_put_get, test_nested_functions,
test_recursive_remote_call, test_mutually_recursive_functions, test_ray_recursive_objects,
test_passing_arguments_by_value_out_of_the_box, test_putting_object_that_closes_over_object_ref,
test_nonascii_in_function_body, test_failed_task (without Ray's error_pubsub fixture); its argument tests
(test_keyword_args, test_args_*, test_oversized_function) are in test_ray_own_basic_args.py.
Where Ray starts a 1-CPU cluster, the task asks for the session's 4 CPUs (one runs at a time, as on 1 CPU).

Not ported, and why: test_http_proxy, test_default_worker_import_dependency, test_import_ray_does_not_import_grpc,
test_function_descriptor (Ray's gRPC, worker script and ``ray._raylet``: none here); test_release_resources_race
(object store memory); test_worker_isolation_by_resources, test_max_calls_releases_resources, the GPU calls of
test_submit_api (a task holds no GPUs here: ``num_gpus`` on a task raises; ``max_calls`` is refused);
test_submit_api's infeasible task (a request the cluster cannot fill raises at once here, it does not pend);
test_ray_options (``memory=`` is refused, and ``available_resources`` in a task is its worker's own session);
test_omp_threads_set (OMP_NUM_THREADS is not set per task); test_invalid_arguments and test_options (they check
``ray._private.ray_option_utils`` and its messages; ray_compat checks options with its own messages, in
test_ray_compat_refusals.py); test_disable_cuda_devices and the placement-group part of
test_release_cpu_resources are covered by test_ray_compat_clients.py and test_ray_own_placement_group.py.
"""

from __future__ import annotations

import os

import pytest

import runtime.ray_compat as ray

pytestmark = [pytest.mark.usefixtures("ray_start_regular_shared"), pytest.mark.processes]

ONE_CPU = {"num_cpus": 4}  # the module session has 4: a task asking for all of them runs alone, as on 1 CPU


def test_release_cpu_resources():
    """test_basic.py::test_release_cpu_resources (its first part)."""

    @ray.remote(num_cpus=1)
    def child():
        return 3

    @ray.remote(**ONE_CPU)
    def parent():
        # Parent should release the CPU resource
        # to run child.
        return ray.get(child.remote())

    assert ray.get(parent.remote()) == 3


def test_not_release_resource():
    """test_basic.py::test_not_release_resource."""

    @ray.remote(**ONE_CPU)
    def task1():
        return [1] * (1024 * 1024)

    o1 = task1.remote()

    @ray.remote(**ONE_CPU)
    def task2(*args, **kwargs):
        # ray.get here should not release
        # CPU resource since the object is already
        # available in args[0]
        assert args[0] == ray.get(kwargs["o"][0])
        return os.getpid()

    @ray.remote(**ONE_CPU)
    def task3(*args):
        return os.getpid()

    o2 = task2.remote(o1, o=[o1])
    # This should run after task2 finishes
    o3 = task3.remote(o1)
    assert len(set(ray.get([o2, o3]))) == 1


def test_grpc_message_size():
    """test_basic.py::test_grpc_message_size (Ray issue 7263: a 10 MiB task spec)."""

    @ray.remote
    def bar(*a):
        return

    # 50KiB, not enough to spill to plasma, but will be inlined.
    def f():
        return bytearray(50000)

    # Executes a 10MiB task spec
    ray.get(bar.remote(*[f() for _ in range(200)]))


def test_submit_api():
    """test_basic.py::test_submit_api, without its GPU and infeasible-resource calls."""

    @ray.remote
    def f(n):
        return list(range(n))

    assert f._remote([0], num_returns=0) is None
    id1 = f._remote(args=[1], num_returns=1)
    assert ray.get(id1) == [0]
    id1, id2 = f._remote(args=[2], num_returns=2)
    assert ray.get([id1, id2]) == [0, 1]
    id1, id2, id3 = f._remote(args=[3], num_returns=3)
    assert ray.get([id1, id2, id3]) == [0, 1, 2]

    # Check mismatch with num_returns.
    with pytest.raises(ValueError):
        ray.get(f.options(num_returns=2).remote(3))
    with pytest.raises(ValueError):
        ray.get(f.options(num_returns=3).remote(2))

    @ray.remote
    class Actor:
        def __init__(self, x, y=0):
            self.x = x
            self.y = y

        def method(self, a, b=0):
            return self.x, self.y, a, b

    @ray.remote
    class Actor2:
        def __init__(self):
            pass

        def method(self):
            pass

    a = Actor._remote(args=[0], kwargs={"y": 1})

    a2 = Actor2._remote()
    ray.get(a2.method._remote())

    id1, id2, id3, id4 = a.method._remote(args=["test"], kwargs={"b": 2}, num_returns=4)
    assert ray.get([id1, id2, id3, id4]) == [0, 1, "test", 2]


def test_put_get():
    """test_basic.py::test_put_get."""
    for i in range(100):
        value_before = i * 10**6
        object_ref = ray.put(value_before)
        value_after = ray.get(object_ref)
        assert value_before == value_after

    for i in range(100):
        value_before = i * 10**6 * 1.0
        object_ref = ray.put(value_before)
        value_after = ray.get(object_ref)
        assert value_before == value_after

    for i in range(100):
        value_before = "h" * i
        object_ref = ray.put(value_before)
        value_after = ray.get(object_ref)
        assert value_before == value_after

    for i in range(100):
        value_before = [1] * i
        object_ref = ray.put(value_before)
        value_after = ray.get(object_ref)
        assert value_before == value_after


def test_nested_functions():
    """test_basic.py::test_nested_functions."""

    # Make sure that remote functions can use other values that are defined
    # after the remote function but before the first function invocation.
    @ray.remote
    def f():
        return g(), ray.get(h.remote())

    def g():
        return 1

    @ray.remote
    def h():
        return 2

    assert ray.get(f.remote()) == (1, 2)


def test_recursive_remote_call():
    """test_basic.py::test_recursive_remote_call."""

    # Test a remote function that recursively calls itself.
    @ray.remote
    def factorial(n):
        if n == 0:
            return 1
        return n * ray.get(factorial.remote(n - 1))

    assert ray.get(factorial.remote(0)) == 1
    assert ray.get(factorial.remote(1)) == 1
    assert ray.get(factorial.remote(2)) == 2
    assert ray.get(factorial.remote(3)) == 6
    assert ray.get(factorial.remote(4)) == 24
    assert ray.get(factorial.remote(5)) == 120


def test_mutually_recursive_functions():
    """test_basic.py::test_mutually_recursive_functions."""

    # Test remote functions that recursively call each other.
    @ray.remote
    def factorial_even(n):
        assert n % 2 == 0
        if n == 0:
            return 1
        return n * ray.get(factorial_odd.remote(n - 1))

    @ray.remote
    def factorial_odd(n):
        assert n % 2 == 1
        return n * ray.get(factorial_even.remote(n - 1))

    assert ray.get(factorial_even.remote(4)) == 24
    assert ray.get(factorial_odd.remote(5)) == 120


def test_ray_recursive_objects():
    """test_basic.py::test_ray_recursive_objects."""

    class ClassA:
        pass

    # Make a list that contains itself.
    lst = []
    lst.append(lst)
    # Make an object that contains itself as a field.
    a1 = ClassA()
    a1.field = a1
    # Make two objects that contain each other as fields.
    a2 = ClassA()
    a3 = ClassA()
    a2.field = a3
    a3.field = a2
    # Make a dictionary that contains itself.
    d1 = {}
    d1["key"] = d1
    # Create a list of recursive objects.
    recursive_objects = [lst, a1, a2, a3, d1]

    # Serialize the recursive objects.
    for obj in recursive_objects:
        ray.put(obj)


def test_passing_arguments_by_value_out_of_the_box():
    """test_basic.py::test_passing_arguments_by_value_out_of_the_box."""

    @ray.remote
    def f(x):
        return x

    # Test passing lambdas.

    def temp():
        return 1

    assert ray.get(f.remote(temp))() == 1
    assert ray.get(f.remote(lambda x: x + 1))(3) == 4

    # Test sets.
    assert ray.get(f.remote(set())) == set()
    s = {1, (1, 2, "hi")}
    assert ray.get(f.remote(s)) == s

    # Test types.
    assert ray.get(f.remote(int)) is int
    assert ray.get(f.remote(float)) is float
    assert ray.get(f.remote(str)) is str

    class Foo:
        def __init__(self):
            pass

    # Make sure that we can put and get a custom type. Note that the result
    # won't be "equal" to Foo.
    ray.get(ray.put(Foo))


def test_putting_object_that_closes_over_object_ref():
    """test_basic.py::test_putting_object_that_closes_over_object_ref (Ray issue 1317)."""

    class Foo:
        def __init__(self):
            self.val = ray.put(0)

        def method(self):
            _ = f

    f = Foo()
    ray.put(f)


def test_nonascii_in_function_body():
    """test_basic.py::test_nonascii_in_function_body."""

    @ray.remote
    def return_a_greek_char():
        return "φ"

    assert ray.get(return_a_greek_char.remote()) == "φ"


def test_failed_task():
    """test_basic.py::test_failed_task."""

    @ray.remote
    def throw_exception_fct1():
        raise Exception("Test function 1 intentionally failed.")

    @ray.remote
    def throw_exception_fct2():
        raise Exception("Test function 2 intentionally failed.")

    @ray.remote(num_returns=3)
    def throw_exception_fct3(x):
        raise Exception("Test function 3 intentionally failed.")

    throw_exception_fct1.remote()
    throw_exception_fct1.remote()

    x = throw_exception_fct2.remote()
    try:
        ray.get(x)
    except Exception as e:
        assert "Test function 2 intentionally failed." in str(e)
    else:
        # ray.get should throw an exception.
        raise AssertionError("ray.get should throw an exception.")

    x, y, z = throw_exception_fct3.remote(1.0)
    for ref in [x, y, z]:
        try:
            ray.get(ref)
        except Exception as e:
            assert "Test function 3 intentionally failed." in str(e)
        else:
            # ray.get should throw an exception.
            raise AssertionError("ray.get should throw an exception.")

    class CustomException(ValueError):
        def __init__(self, msg):
            super().__init__(msg)
            self.field = 1

        def f(self):
            return 2

    @ray.remote
    def f():
        raise CustomException("This function failed.")

    try:
        ray.get(f.remote())
    except Exception as e:
        assert "This function failed." in str(e)
        assert isinstance(e, ValueError)
        assert isinstance(e, CustomException)
        assert isinstance(e, ray.exceptions.RayTaskError)
        assert "RayTaskError(CustomException)" in repr(e)
        assert e.field == 1
        assert e.f() == 2
    else:
        # ray.get should throw an exception.
        raise AssertionError("ray.get should throw an exception.")
