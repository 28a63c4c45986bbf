"""Every printed fix leads to a valid config: for each problem of the invalid-config catalogue whose fix names
concrete values (`use tp in [1, 2]`, `use one of: a, b`, `pick one of: ...`, `set key=value`), apply each
offered value to the entry's overrides and validate again: the problem's key must then be clean (other keys
may still hold the entry's other defects). A hint that offers a value the validator then refuses fails here.
The check runs inside test_config_invalid.py's per-entry test (one load of each entry, not two)."""
import re

import pytest

from rlrun.config import ConfigError, load
from rlrun.config.schema import free_form_paths
from test_config_invalid import CATALOGUE

_LIST = re.compile(r"\b(\w+) in \[([^\]]+)\]")
_ONE_OF = re.compile(r"\b(?:use|pick) one of: ([\w.\-]+(?:, [\w.\-]+)*)")
_KV = r"[a-z_]+(?:\.\w+)*=[^\s,;()`]+"
_SET = re.compile(rf"^set ({_KV}(?: and {_KV})*)")


def _problems(overrides: list[str]) -> list:
    try:
        load(overrides)
    except ConfigError as e:
        return e.problems
    return []


def _path_of(name: str, problem_path: str, known: set[str]) -> str:
    parent = problem_path.rpartition(".")[0]
    for path in (problem_path, f"{parent}.{name}", f"parallelism.{name}"):
        if path.rpartition(".")[2] == name and path in known:
            return path
    raise AssertionError(f"the hint names {name!r}, which is no key near {problem_path}")


def offered(problem, known: set[str]) -> list[list[str]]:
    """The alternatives a fix offers, each as the overrides that apply it."""
    out = []
    for name, values in _LIST.findall(problem.fix):
        path = _path_of(name, problem.path, known)
        extra = ["parallelism.pp=1", "parallelism.cp=1"] if "with pp=cp=1" in problem.fix else []
        out += [[f"{path}={v.strip()}", *extra] for v in values.split(",")]
    for values in _ONE_OF.findall(problem.fix):
        options = values.split(", ")
        if problem.path in GROUPS:  # the group's option files, listed by the composer: two stand for them all
            options = options[:2]
        out += [[f"{problem.path}={v}"] for v in options]
    if not out and (m := _SET.match(problem.fix)):
        out.append(m.group(1).split(" and "))
    return out


def _leaves(d: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in d.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}"}
    return out


GROUPS = {"model", "algo", "hardware", "data", "parallelism", "experiment"}
KNOWN = _leaves(load([]).model_dump()) | GROUPS


OFFERED: dict[str, int] = {}  # problem path -> alternatives tried (the count test reads it)


def check_offered_fixes(overrides: list[str], problems: list) -> None:
    """Apply each alternative the problems' fixes offer and validate again: the problem's key must be clean.
    test_config_invalid.py calls it for every catalogue entry with the problems it already has."""
    for problem in problems:
        for alternative in offered(problem, KNOWN):
            OFFERED[problem.path] = OFFERED.get(problem.path, 0) + 1
            keys = {o.lstrip("+~").split("=", 1)[0] for o in alternative}
            base = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in keys]
            left = [p for p in _problems([*base, *alternative]) if p.path == problem.path]
            assert left == [], f"applying {alternative} (the fix printed for {problem.path}) leaves: {left}"


def test_the_tp_hint_for_qwen3_4b_offers_only_tps_its_32_heads_and_8_kv_groups_take():
    base = ["hardware=h100", "model=qwen3-4b", "checkpoint.random_init=true", "train.gpus_per_node=6",
            "rollout.rollout_batch_size=6", "rollout.n_samples_per_prompt=8", "train.global_batch_size=48"]
    (problem,) = [p for p in _problems([*base, "parallelism.tp=4"]) if p.path == "parallelism.tp"]
    assert "tp in [1, 2]" in problem.fix  # 3 and 6 divide the 6 GPUs but not the 32 heads
    world, heads, groups = [p for p in _problems([*base, "train.gpus_per_node=8", "parallelism.tp=3"])
                            if p.path == "parallelism.tp"]
    assert "32 attention heads" in heads.message and "8 KV groups" in groups.message
    for problem in (world, heads, groups):  # 16 and 32 split the heads, but over more GPUs than the trainer's 8
        assert "tp in [1, 2, 4, 8]" in problem.fix


def test_plus_key_hint_names_the_sections_that_take_new_keys():
    (problem,) = _problems(["optim.foo=1"])
    assert "+key=value adds a key only under hardware.env or rollout.sglang or train.megatron" in problem.fix
    assert free_form_paths() == ["hardware.env", "rollout.sglang", "train.megatron"]
    assert [p.path for p in _problems(["+optim.foo=1"])] == ["optim.foo"]  # refused, as the hint now says
    assert _problems(["+hardware.env.MY_FLAG=1"]) == []
    assert [p.path for p in _problems(["+rollout.sglang.disable_radix_cache=true"])] == ["rollout.sglang"]  # hf
    assert _problems(["+rollout.sglang.disable_radix_cache=true", "hardware=h100", "model=qwen3-0.6b", "rollout.engine=sglang",
                      "checkpoint.random_init=true", "train.backend=megatron"]) == []
