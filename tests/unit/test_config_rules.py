"""Rules details not covered by the invalid catalogue: valid edge cases that must pass, and lists kept in
step with other packages."""
import pytest

from rlrun.config import ConfigError, load
from rlrun.config.kinds import REWARDS


def test_reward_types_are_the_reward_packages_rules_and_the_remote_types():
    from rlrun.reward.rules import RULES

    assert REWARDS.names() == ("deepscaler", "math", "dapo", "f1", "gpqa", "exact_match", "char_match", "random",
                               "zero", "remote", "remote_rm", "reward_model")
    assert list(RULES) == [n for n in REWARDS.names() if REWARDS[n].score]
    assert [n for n in REWARDS if REWARDS[n].remote] == ["remote", "remote_rm"]
    assert [n for n in REWARDS if REWARDS[n].judged] == ["reward_model"]
    assert RULES["f1"]("the cat", "cat") == 1.0  # resolved from its spec's path (articles removed)
    assert RULES["zero"]("7", "7") == 0.0  # slime's --opd-type sglang example trains on 0 rewards


@pytest.mark.parametrize("overrides", [
    ["model=glm4-9b", "hardware=h100", "parallelism.tp=4"],             # 2 KV groups, TP 4: replicated KV heads
    ["model=glm4-9b", "hardware=h100", "parallelism.tp=8"],
    ["data.rm_type=boxed_math"], ["data.rm_type=my_pkg.rewards:score"],  # boxed_ prefix, custom function
    ["algo=reinforce_plus_plus", "rollout.n_samples_per_prompt=1"],      # no group needed
    ["train.num_steps_per_rollout=4"],                                    # 64 / 4 = 16 per step
    ["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "train.gpus_per_node=4", "rollout.num_gpus=4"],
])
def test_valid_edge_cases(overrides):
    load(overrides)


def test_batch_identity_message_has_the_numbers():
    with pytest.raises(ConfigError) as e:
        load(["experiment=qwen3-4b-grpo-mi300x", "rollout.rollout_batch_size=20"])
    (p,) = [p for p in e.value.problems if p.path == "train.global_batch_size"]
    assert "20 * 8 = 160" in p.message and "256" in p.message and "divisor of 160" in p.fix


def test_kv_groups_fix_names_valid_tp():
    with pytest.raises(ConfigError) as e:
        load(["hardware=h100", "model=qwen3-14b", "parallelism.tp=4", "model.num_query_groups=10"])
    (p,) = e.value.problems
    # 5, 10, 20 split the 40 heads and fit the 10 groups, but not the 8 GPUs of the trainer
    assert p.path == "parallelism.tp" and "10 KV groups and TP 4" in p.message and "tp in [1, 2]" in p.fix


def test_env_values_become_strings():
    env = load(["+hardware.env.FOO=1", "+hardware.env.BAR=true"]).hardware.env
    assert (env["FOO"], env["BAR"]) == ("1", "true")


@pytest.mark.parametrize("backend", ["torch", "megatron"])
def test_kl_reference_from_the_seeded_random_init_is_valid_on_both_backends(backend):
    # Both backends build the reference from the same seeded random init as the policy when checkpoint.hf is null
    # (megatron_backend._hf_getter(None, ...) = the torch backend's build_causal_lm under run.seed), so KL against
    # it is fine; only a policy resumed from checkpoint.load would be pulled towards random weights.
    base = ["hardware=h100", "model=qwen3-0.6b", "checkpoint.random_init=true", f"train.backend={backend}", "algo.use_kl_loss=true",
            "algo.kl_loss_coef=0.01"]
    cfg = load(base)
    assert cfg.checkpoint.hf is None and cfg.checkpoint.ref is None
    with pytest.raises(ConfigError) as e:
        load(base + ["checkpoint.load=/ckpt/run1"])
    assert [p.path for p in e.value.problems] == ["checkpoint.ref"]


# ---- rollout.weight_sync ------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, transport", [
    ([], "tensor"),                                                                     # cpu profile: colocated
    (["hardware=h100", "model=qwen3-0.6b", "train.gpus_per_node=1"], "tensor"),         # the GPU e2e run
    (["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "train.gpus_per_node=4", "rollout.num_gpus=4"],
     "distributed"),
    (["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=2", "cluster.num_nodes=2"], "disk"),  # colocated, 2 nodes
    (["rollout.weight_sync=disk"], "disk"),
    (["rollout.weight_sync=distributed"], "distributed"),                              # gloo: CPU slots may share
])
def test_weight_sync_auto_and_explicit_choices(overrides, transport):
    from rlrun.config.plan import make_plan
    from rlrun.config.render import summary_lines

    plan = make_plan(load(overrides))
    assert plan.weight_sync == transport and plan.weight_sync_bucket_mb == 512
    assert plan.to_dict()["weight_sync"] == transport  # `rlrun plan --json`
    route = "; gathered per engine: engine 0 <- ranks 0" if transport == "tensor" else ""  # one rank, one engine
    assert f"weight sync: {transport} (buckets of 512 MB{route})" in summary_lines(plan)[2]


@pytest.mark.parametrize("overrides, words", [
    (["train.colocate=false", "rollout.num_gpus=1", "rollout.weight_sync=tensor"], "train.colocate is false"),
    (["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=2", "cluster.num_nodes=2", "rollout.weight_sync=tensor"],
     "does not cross nodes"),
    (["hardware=h100", "model=qwen3-0.6b", "rollout.weight_sync=distributed"], "two ranks of one group on one GPU"),
])
def test_weight_sync_transport_must_fit_the_placement(overrides, words):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    (p,) = [p for p in e.value.problems if p.path == "rollout.weight_sync"]
    assert words in p.message and "rollout.weight_sync=" in p.fix


def test_weight_sync_bucket_must_be_positive():
    with pytest.raises(ConfigError) as e:
        load(["rollout.weight_sync_bucket_mb=0"])
    assert [p.path for p in e.value.problems] == ["rollout.weight_sync_bucket_mb"]
    with pytest.raises(ConfigError, match="use one of: auto, delta, disk, distributed, tensor"):
        load(["rollout.weight_sync=nccl"])


def test_toy_task_names_match_the_packaged_tasks_and_are_refused_with_real_data():
    import typing

    from rlrun.config.schema import DataSection
    from rlrun.data.toy import TOY_TASKS

    assert set(typing.get_args(DataSection.model_fields["toy_task"].annotation)) == set(TOY_TASKS)
    with pytest.raises(ConfigError) as e:
        load(["data.toy_task=reverse", "data.prompt_data=/data/x.jsonl"])
    assert [p.path for p in e.value.problems] == ["data.toy_task"]
    assert load(["data.toy_task=reverse"]).data.toy_task == "reverse"


# ---- engines wider than a node (SGLang --nnodes) ---------------------------------------------------------------
def _problems(overrides):
    with pytest.raises(ConfigError) as e:
        load(overrides)
    return {p.path: p for p in e.value.problems}


def test_an_engine_of_12_gpus_on_nodes_of_8_names_the_whole_node_widths():
    p = _problems(["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=3", "cluster.num_nodes=3",
                   "rollout.gpus_per_engine=12", "rollout.rollout_batch_size=48"])
    assert list(p) == ["rollout.gpus_per_engine"]
    assert "not a whole number of nodes" in p["rollout.gpus_per_engine"].message
    assert p["rollout.gpus_per_engine"].fix == "set rollout.gpus_per_engine <= 8 or to a multiple of it (8 or 16)"


def test_a_colocated_engine_over_trainer_nodes_of_uneven_share_is_refused():
    # trainer nodes of 6 GPUs (hardware nodes of 8): an engine of 8 would take 6 + 2
    p = _problems(["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=4", "cluster.num_nodes=4",
                   "train.gpus_per_node=6", "rollout.gpus_per_engine=8", "rollout.rollout_batch_size=48"])
    assert list(p) == ["rollout.gpus_per_engine"]
    assert "divides 6 or is a multiple of it" in p["rollout.gpus_per_engine"].fix


def test_colocated_tensor_push_to_an_engine_over_nodes_names_the_missing_feature():
    p = _problems(["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=2", "cluster.num_nodes=2",
                   "rollout.gpus_per_engine=16", "rollout.weight_sync=tensor"])
    assert list(p) == ["rollout.weight_sync"]
    assert "colocated engines spanning nodes need the feature rlrun lacks" in p["rollout.weight_sync"].message
    assert p["rollout.weight_sync"].fix.startswith("set rollout.weight_sync=disk")


def test_rlrun_sets_the_multi_node_server_args_itself():
    p = _problems(["hardware=h100", "model=qwen3-0.6b", "+rollout.sglang.nnodes=2", "+rollout.sglang.node_rank=0",
                   "+rollout.sglang.dist_init_addr='10.0.0.1:5000'"])
    assert set(p) == {"rollout.sglang.nnodes", "rollout.sglang.node_rank", "rollout.sglang.dist_init_addr"}
    assert p["rollout.sglang.nnodes"].fix == ("remove rollout.sglang.nnodes and set rollout.gpus_per_engine / "
                                             "hardware.gpus_per_node instead")
