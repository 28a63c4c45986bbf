"""Plan arithmetic with hand-computed values: rank layout, placement on nodes, parameters and memory."""
import pytest

from rlrun.config import load
from rlrun.config.memory import GiB
from rlrun.config.plan import Slot, make_plan


@pytest.fixture(scope="module")
def seed():
    return make_plan(load(["experiment=qwen3-4b-grpo-mi300x"]))


def test_seed_params_and_memory_by_hand(seed):
    # qwen3-4b layer: qkv 2560*(32+2*8)*128 + o 32*128*2560 + qk-norm 2*128 + MLP 3*2560*9728 + 2 norms 2*2560
    layer = 2560 * 48 * 128 + 4096 * 2560 + 256 + 3 * 2560 * 9728 + 5120
    assert layer == 100_930_816
    embedding = 151936 * 2560  # tied: no separate lm head
    assert seed.params_total == seed.params_active == embedding + 36 * layer + 2560 == 4_022_468_096
    per_gpu = 36 * layer // 2 + embedding // 2 + 2560  # TP 2
    m = seed.memory
    assert m["trainer_params_per_gpu"] == per_gpu == 2_011_235_328
    assert m["trainer_weights"] == pytest.approx(2 * per_gpu / GiB)
    assert m["trainer_grads"] == pytest.approx(4 * per_gpu / GiB)
    assert m["trainer_optimizer"] == pytest.approx(12 * per_gpu / 4 / GiB)  # distributed over DP 4
    assert m["kv_bytes_per_token"] == 2 * 36 * (8 // 2) * 128 * 2  # K and V, 36 layers, 4 KV heads per GPU, bf16
    # SGLang reserves 0.7 * 192 GiB; offload is off on AMD, so trainer and engine add up.
    assert m["engine_total"] == pytest.approx(0.7 * 192 + 1.0)
    assert m["peak"] == pytest.approx(m["trainer_total"] + m["engine_total"])
    assert seed.fits and seed.memory_gib["available"] == 192.0


def test_offload_takes_the_larger_phase():
    plan = make_plan(load(["experiment=glm4-9b-grpo-h100"]))  # H100: offload on for both
    m = plan.memory
    assert m["peak"] == pytest.approx(max(m["trainer_total"], m["engine_total"]))
    no_off = make_plan(load(["experiment=glm4-9b-grpo-h100", "train.offload=false", "rollout.offload=false"]))
    assert no_off.memory["peak"] == pytest.approx(m["trainer_total"] + m["engine_total"]) and not no_off.fits


def test_rank_layout_is_megatron_order():
    plan = make_plan(load(["experiment=glm4-9b-grpo-h100"]))  # TP 2 x CP 2 x DP 2
    coords = [(r.tp, r.cp, r.dp) for r in plan.ranks]
    assert coords == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]


def test_disaggregated_engines_follow_the_hardware_node_size():
    # 4-GPU nodes: the trainer fills node 0, engines of 2 GPUs go to node 1 (slime assumed 8 per node).
    plan = make_plan(load(["hardware=h100", "model=qwen3-4b", "hardware.gpus_per_node=4", "train.colocate=false",
                           "rollout.num_gpus=4", "cluster.num_nodes=2"]))
    engines = [s for s in plan.placement if s.role == "engine"]
    assert engines == [Slot(1, 0, "engine", 0), Slot(1, 1, "engine", 0), Slot(1, 2, "engine", 1),
                       Slot(1, 3, "engine", 1)]
    assert (plan.num_nodes, plan.trainer_gpus, plan.rollout_gpus) == (2, 4, 4)


def test_disaggregated_engines_fill_free_gpus_without_straddling():
    plan = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.gpus_per_node=2", "train.colocate=false",
                           "rollout.num_gpus=8", "rollout.gpus_per_engine=4", "cluster.num_nodes=2",
                           "train.global_batch_size=null"]))
    assert [(s.node, s.gpu) for s in plan.engine_slots(0)] == [(0, 2), (0, 3), (0, 4), (0, 5)]
    assert [(s.node, s.gpu) for s in plan.engine_slots(1)] == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_moe_params_per_gpu_split_experts_over_ep():
    plan = make_plan(load(["model=qwen3-30b-a3b", "hardware=h200"]))  # TP 4, EP 8
    assert round(plan.params_total / 1e9, 1) == 30.5 and round(plan.params_active / 1e9, 1) == 3.4
    # 48 layers x 128/8 experts x 3*2048*768 on every rank (expert-tensor-parallel 1)
    experts_per_gpu = 48 * 16 * 3 * 2048 * 768
    assert plan.memory["trainer_params_per_gpu"] > experts_per_gpu
    assert plan.memory["trainer_params_per_gpu"] - experts_per_gpu < 0.4e9
