"""The fast point composer gives exactly what Hydra gives, for values and for errors."""
import pytest

from rlrun.config import ConfigError
from rlrun.config.compose import Composer
from rlrun.config.points import PointComposer, resolve

CASES = [
    [], ["optim.lr=3e-6", "rollout.n_samples_per_prompt=4"],
    ["model=qwen3-4b", "hardware=mi300x", "optim.lr=3e-6"],
    ["experiment=qwen3-4b-grpo-mi300x", "+rollout.sglang.chunked_prefill_size=4096", "~eval.datasets"],
    ["model.name=foo", "hardware.gpus_per_node=4"],                # interpolated run.name, train.gpus_per_node
    ["train.recompute={granularity: full}"], ["+rollout.sglang={a: 1}"], ["++rollout.sglang.b=2"],
    ["+checkpoint.hf=/x"], ["rollout.stop=[a,'b c']"], ["train.global_batch_size=null"],
    ["rollout.sglang={a: 1}"], ["rollout.temprature=1"], ["+optim.lr=1"], ["~checkpoint.hf"],
]


@pytest.fixture(scope="module")
def composers():
    with Composer() as c:
        yield c, PointComposer(c)


def _outcome(fn, ov):
    try:
        return fn(ov).raw
    except ConfigError as e:
        return ("error", tuple(e.paths))


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c) or "default" for c in CASES])
def test_point_composer_equals_hydra(composers, overrides):
    hydra, fast = composers
    assert _outcome(fast.compose, overrides) == _outcome(hydra.compose, overrides)


def test_resolve_keeps_types_and_detects_cycles():
    assert resolve({"a": {"b": 3}, "c": "${a.b}", "d": "x-${a.b}"}) == {"a": {"b": 3}, "c": 3, "d": "x-3"}
    with pytest.raises(ConfigError):
        resolve({"a": "${b}", "b": "${a}"})
