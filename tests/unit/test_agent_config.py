"""rlrun validate for rollout.generate_fn, rollout.max_turns and data.source; the data sources' semantics."""
import pytest

from rlrun.agent.source import BufferedDataSource, DataSource
from rlrun.config import ConfigError, load
from rlrun.data.dataset import PromptItem

USER = '''
from rlrun.agent import Environment
from rlrun.agent.source import BufferedDataSource

async def good(handle, sample, sampling):
    return sample

async def two(handle, sample):
    return sample

def not_async(handle, sample, sampling):
    return sample

async def slime_style(args, sample, sampling_params):
    return sample

async def slime_reward(args, sample, **kwargs):
    return 1.0

def sync_reward(args, sample):
    return 1.0

class Env(Environment):
    pass

class NotASource:
    pass

class BadParser(Environment):
    parser = "qwen_xml"

class BadTools(Environment):
    tools = {"lookup": "not a function"}

class Source(BufferedDataSource):
    pass
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "user_code.py"
    path.write_text(USER)
    return path


def problems(overrides):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    return {p.path: p for p in e.value.problems}


@pytest.mark.parametrize("name,slime", [("good", False), ("Env", False), ("slime_style", True)])
def test_valid_generate_fns(user_file, name, slime):
    cfg = load([f"rollout.generate_fn={'slime:' if slime else ''}{user_file}:{name}", "rollout.max_turns=3",
                f"data.source={user_file}:Source"])
    assert cfg.rollout.max_turns == 3


@pytest.mark.parametrize("spec,words", [
    ("{f}:two", "takes 2 required positional arguments"),
    ("{f}:not_async", "is not an async function"),
    ("{f}:NotASource", "not an rlrun.agent.Environment subclass"),
    ("{f}:BadParser", "parser 'qwen_xml' is not one of hermes, none"),
    ("{f}:BadTools", "tools ['lookup'] are not callable"),
    ("{f}:missing", "has no function or class 'missing'"),
    ("no/such/file.py:f", "does not exist"),
    ("no_such_pkg.mod:f", "cannot import 'no_such_pkg.mod'"),
    ("nonsense", "neither a built-in"),
])
def test_bad_generate_fns_are_problems_on_the_key(user_file, spec, words):
    p = problems([f"rollout.generate_fn={spec.format(f=user_file)}"])["rollout.generate_fn"]
    assert words in p.message and "async function (handle, sample, sampling)" in p.fix


def test_slime_reward_functions_need_a_slime_or_rlruns_own_generation_and_the_same_eval_type(user_file):
    gen, rm = f"rollout.generate_fn=slime:{user_file}:slime_style", f"slime:{user_file}:slime_reward"
    assert load([gen, f"data.rm_type={rm}"]).data.rm_type == rm
    # rlrun's own generation is slime's default generate: scored through the adapter (rlrun.agent.slime_rollout)
    assert load([f"data.rm_type={rm}"]).data.rm_type == rm
    found = problems([f"data.rm_type={rm}", f"rollout.generate_fn={user_file}:good", "eval.interval=5",
                      "eval.datasets=[{name: a, path: a.jsonl, rm_type: math}]"])
    assert f"rollout.generate_fn is '{user_file}:good'" in found["data.rm_type"].message
    assert "rollout.generate_fn=slime:" in found["data.rm_type"].fix
    assert found["eval.datasets.0.rm_type"].fix == f"set eval.datasets.0.rm_type={rm}"
    p = problems([gen, f"data.rm_type=slime:{user_file}:sync_reward"])["data.rm_type"]
    assert "is not an async function" in p.message
    p = problems([gen, f"data.rm_type=slime:{user_file}:missing"])["data.rm_type"]
    assert "has no function or class 'missing'" in p.message


def test_partial_rollout_is_refused_for_slime_functions(user_file):
    with pytest.raises(ConfigError) as e:  # the sync loop's own refusal is on the same key: look at all
        load([f"rollout.generate_fn=slime:{user_file}:slime_style", "rollout.partial_rollout=true"])
    assert any("sends its own requests" in p.message for p in e.value.problems if p.path == "rollout.partial_rollout")


def test_a_slime_function_without_slime_on_the_path_says_so(tmp_path):
    f = tmp_path / "needs_slime.py"
    f.write_text("from slime.utils.types import Sample\n\nasync def generate(args, sample, p):\n    return sample\n")
    import importlib.util

    if importlib.util.find_spec("slime") is not None:
        pytest.skip("slime is importable here")
    found = problems([f"rollout.generate_fn=slime:{f}:generate", f"data.rm_type=slime:{f}:generate"])
    for key in ("rollout.generate_fn", "data.rm_type"):
        assert "imports slime, which does not import here" in found[key].message
        assert "put a slime checkout on PYTHONPATH" in found[key].message


def test_the_preflight_finds_the_module_of_a_slime_path():
    from rlrun.launch.preflight import _function

    assert list(_function("rollout.generate_fn", "slime:rlrun.rollout.generate_api:single_turn")) == []
    (p,) = _function("data.rm_type", "slime:no_such_pkg.mod:reward")
    assert "module 'no_such_pkg.mod'" in p.message and "PYTHONPATH" in p.fix  # rlrun.userfn's wording


def test_max_turns_without_a_generate_fn_and_bad_sources_are_reported_together(user_file):
    found = problems(["rollout.max_turns=4", f"data.source={user_file}:NotASource"])
    assert "max_turns would be ignored" in found["rollout.max_turns"].message
    assert "has no sample, add_samples" in found["data.source"].message


class Prompts:
    """A PromptDataset stand-in with its next_batch/state_dict surface (the data source's only use of it)."""

    def __init__(self):
        self.pos = 0

    def next_batch(self, n):
        items = [PromptItem(i, f"p{i}", f"p{i}", [i], str(i)) for i in range(self.pos, self.pos + n)]
        self.pos += n
        return items

    def state_dict(self):
        return {"pos": self.pos}


def test_plain_source_makes_fresh_groups_and_drops_what_it_is_given():
    src = DataSource(Prompts(), 2)
    groups = src.sample(3)
    assert [[s.prompt for s in g] for g in groups] == [["p0", "p0"], ["p1", "p1"], ["p2", "p2"]]
    assert [g[0].group_id for g in groups] == [0, 1, 2]
    src.add_samples(groups[:1])
    assert [g[0].prompt for g in src.sample(1)] == ["p3"]


def test_buffered_source_hands_back_groups_first_in_order():
    src = BufferedDataSource(Prompts(), 2)
    first = src.sample(3)
    src.add_samples([first[2], first[0]])
    again = src.sample(3)
    assert again[0] is first[2] and again[1] is first[0] and again[2][0].prompt == "p3"
    assert src.buffer == []
    with pytest.raises(ValueError, match="n_samples_per_prompt=2"):
        src.add_samples([first[1][:1]])
