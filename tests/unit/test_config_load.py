"""rlrun.config.load / make_plan on the shipped conf/: defaults, the seed recipe, derivations."""
import pytest

from rlrun.config import ConfigError, load, load_with_choices
from rlrun.config.plan import Slot, make_plan


def test_default_is_the_tiny_cpu_grpo_job():
    cfg, composed = load_with_choices([])
    assert composed.choices == {"model": "tiny", "algo": "grpo", "hardware": "cpu", "parallelism": None,
                                "data": "toy", "experiment": None}
    assert (cfg.model.family, cfg.model.num_layers, cfg.model.hidden_size, cfg.model.vocab_size) == ("qwen3", 2, 64, 64)
    assert (cfg.train.backend, cfg.rollout.engine, cfg.train.colocate) == ("torch", "hf", True)
    # The batch sizes and lengths are tuned by the runner (conf/hardware/cpu.yaml); the identity holds.
    r = cfg.rollout
    assert cfg.train.num_steps_per_rollout == 1
    assert cfg.train.global_batch_size == r.rollout_batch_size * r.n_samples_per_prompt  # derived
    assert cfg.data.prompt_data is None and cfg.data.rm_type == "exact_match"
    plan = make_plan(cfg)
    assert (plan.world_size, plan.num_engines, plan.total_steps) == (1, 1, r.num_rollout)
    assert plan.placement == [Slot(0, 0, "trainer", 0), Slot(0, 0, "engine", 0)]


@pytest.mark.parametrize("overrides", [["model=qwen3-4b", "algo=grpo", "hardware=mi300x"],
                                       ["experiment=qwen3-4b-grpo-mi300x"]])
def test_seed_plan_is_tp2_dp4_colocated_32x8_eq_256x1(overrides):
    plan = make_plan(load(overrides))
    assert (plan.world_size, plan.tp, plan.dp, plan.pp, plan.cp, plan.colocate) == (8, 2, 4, 1, 1, True)
    assert (plan.prompts_per_rollout, plan.samples_per_rollout, plan.global_batch_size, plan.steps_per_rollout) \
        == (32, 256, 256, 1)
    # 4 engines of 2 GPUs, each on the GPUs of trainer ranks 2e and 2e+1.
    assert [s.gpu for s in plan.engine_slots(3)] == [6, 7]


def test_seed_recipe_values_and_amd_defaults():
    cfg = load(["experiment=qwen3-4b-grpo-mi300x"])
    assert cfg.model.rotary_base == 1e6 and cfg.model.tie_word_embeddings is True
    assert (cfg.train.offload, cfg.rollout.offload, cfg.train.gradient_accumulation_fusion) == (False, False, False)
    assert cfg.train.num_steps_per_rollout == 1  # derived from gbs 256
    assert (cfg.algo.eps_clip, cfg.algo.eps_clip_high, cfg.algo.kl_loss_type) == (0.2, 0.28, "low_var_kl")
    assert (cfg.eval.interval, cfg.eval.top_p, cfg.eval.temperature) == (20, 1.0, 1.0)
    cooler = load(["experiment=qwen3-4b-grpo-mi300x", "rollout.temperature=0.8"])
    assert cooler.eval.temperature == 0.8  # eval temperature derived from the rollout's
    assert cfg.hardware.env["RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES"] == "1"
    assert cfg.checkpoint.ref == "/root/Qwen3-4B_torch_dist"


def test_nvidia_defaults_lend_the_engines_and_leave_the_trainer_to_the_plan():
    cfg = load(["experiment=glm4-9b-grpo-h100"])
    assert (cfg.train.offload, cfg.rollout.offload) == (None, True)  # None: auto (rlrun.config.memory.trainer_offload)
    plan = make_plan(cfg)
    assert (plan.tp, plan.cp, plan.dp, plan.global_batch_size) == (2, 2, 2, 128)


def test_derivations():
    cfg = load(["rollout.rollout_batch_size=4", "train.num_steps_per_rollout=2"])
    assert cfg.train.global_batch_size == 16  # 4 * 8 / 2
    cfg = load(["rollout.rollout_batch_size=8", "train.global_batch_size=16", "train.num_steps_per_rollout=null"])
    assert cfg.train.num_steps_per_rollout == 4  # 64 / 16
    assert cfg.algo.eps_clip_high == cfg.algo.eps_clip == 0.2
    assert cfg.rollout.context_length == 40960 and cfg.rollout.over_sampling_batch_size == 8  # = rbs
    assert load(["algo=reinforce_plus_plus", "rollout.n_samples_per_prompt=1"]).algo.normalize_std is False


def test_config_is_frozen():
    cfg = load([])
    with pytest.raises(Exception):
        cfg.train.global_batch_size = 3


def test_problems_are_collected_with_paths_and_did_you_mean():
    with pytest.raises(ConfigError) as e:
        load(["+rollout.temprature=1", "rollout.engine=sglan", "train.num_nodes=0"])
    paths = e.value.paths
    assert {"rollout.temprature", "rollout.engine", "train.num_nodes"} <= set(paths)
    text = e.value.render()
    assert 'did you mean "temperature"' in text and 'did you mean "sglang"' in text


def test_unknown_group_option_suggests_closest():
    with pytest.raises(ConfigError) as e:
        load(["model=qwen3-5b"])
    (p,) = e.value.problems
    assert p.path == "model" and 'did you mean "qwen3-8b"' in p.message


def test_disaggregated_without_rollout_gpus_is_a_problem_not_a_crash():
    with pytest.raises(ConfigError) as e:
        load(["train.colocate=false"])
    assert "rollout.num_gpus" in e.value.paths


def test_extra_config_dir(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nrollout:\n  rollout_batch_size: 2\n")
    cfg = load(["experiment=mine"], config_dir=tmp_path)
    assert cfg.train.global_batch_size == 16


def test_broken_yaml_and_bad_experiment_defaults_name_the_file(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "bad.yaml").write_text("# @package _global_\noptim:\n  lr: [1\n")
    (tmp_path / "experiment" / "bad2.yaml").write_text("# @package _global_\ndefaults:\n  - override /model: qwen3-9b\n")
    with pytest.raises(ConfigError) as e:
        load(["experiment=bad"], config_dir=tmp_path)
    assert e.value.paths == [f"{tmp_path}/experiment/bad.yaml:4"]
    with pytest.raises(ConfigError) as e:
        load(["experiment=bad2"], config_dir=tmp_path)
    (p,) = e.value.problems
    assert p.path == "model" and "experiment/bad2.yaml" in p.message and 'did you mean "qwen3-8b"' in p.message


def test_conf_reads_the_same_through_libyaml(tmp_path):
    """Hydra reads conf/ through omegaconf's YAML loader; rlrun.config.compose puts libyaml's C parser under it (the
    same resolvers, constructors and duplicate-key check). Every YAML file of conf/ gives the same tree both ways,
    a duplicate key is still refused and a syntax error still names the file and line."""
    import yaml
    from omegaconf import OmegaConf, _utils

    from rlrun.config.compose import CONF_DIR, _use_libyaml

    _use_libyaml()
    fast, pure = _utils.get_yaml_loader(), _utils.get_yaml_loader.pure
    assert issubclass(fast, yaml.cyaml.CParser) and not issubclass(pure, yaml.cyaml.CParser)
    files = sorted(CONF_DIR.rglob("*.yaml"))
    assert len(files) > 40
    for f in files:
        text = f.read_text()
        a, b = yaml.load(text, Loader=fast), yaml.load(text, Loader=pure)
        assert a == b and repr(a) == repr(b), f  # repr: 1 and 1.0, True and 1 are told apart
        assert OmegaConf.to_container(OmegaConf.load(f)) == OmegaConf.to_container(OmegaConf.create(b)), f
    assert yaml.load("lr: 1e-6\nday: 2001-12-14\nn: 1_000\n", Loader=fast) == {"lr": 1e-6, "day": "2001-12-14",
                                                                                "n": 1000}  # omegaconf's rules
    with pytest.raises(yaml.constructor.ConstructorError, match="found duplicate key lr"):
        OmegaConf.create("lr: 1\nlr: 2\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim:\n  lr: [1\n")
    with pytest.raises(yaml.YAMLError) as e:
        OmegaConf.load(bad)
    assert (e.value.problem_mark.name, e.value.problem_mark.line) == (str(bad), 2)
