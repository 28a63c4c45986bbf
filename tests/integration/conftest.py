import pytest


@pytest.fixture(scope="module")
def ray_cpu():
    """An embedded Ray with 4 logical CPUs for one test module (the runner reuses a caller's connection)."""
    import ray

    ray.init(address="local", num_cpus=4, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
