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
    # SGLang reserves 0.7 * 192 GiB; offload is off on AMD, so trainer and engine add up, plus the trainer
    # process's 2 GiB outside PyTorch's allocator (CUDA context, libraries, NCCL).
    assert m["engine_total"] == pytest.approx(0.7 * 192 + 1.0)
    assert m["trainer_overhead"] == 2.0
    assert m["peak"] == pytest.approx(m["trainer_total"] + 2.0 + m["engine_total"])
    assert seed.fits and seed.memory_gib["available"] == 192.0


def test_offload_takes_the_larger_phase():
    plan = make_plan(load(["experiment=glm4-9b-grpo-h100"]))  # H100: offload on for both
    m = plan.memory
    # an offloaded trainer keeps its CUDA context and NCCL buffers (2 GiB) through the rollout phase; the push is a
    # phase of its own: the trainer back whole but its activations, the engines' weights resumed with their runtime
    # (1 GiB), and two 512 MiB buckets staged
    rollout_or_train = max(m["trainer_total"], m["engine_total"]) + 2.0
    push = m["trainer_total"] - m["trainer_activations"] + 2.0 + m["engine_weights"] + 1.0 + 2 * 512 / 1024
    assert push > rollout_or_train  # GLM4-9B: the engines' 8.75 GiB of weights outweigh the activations (4.2)
    assert m["peak"] == pytest.approx(push)
    disk = make_plan(load(["experiment=glm4-9b-grpo-h100", "rollout.weight_sync=disk"])).memory
    assert disk["peak"] == pytest.approx(rollout_or_train)  # a file push: the trainer leaves before the engines resume
    no_off = make_plan(load(["experiment=glm4-9b-grpo-h100", "train.offload=false", "rollout.offload=false"]))
    assert no_off.memory["peak"] == pytest.approx(m["trainer_total"] + 2.0 + m["engine_total"]) and not no_off.fits


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


def test_an_engine_wider_than_a_node_takes_whole_free_nodes():
    # trainer: 8 GPUs of node 0 (and 4 of node 1 would be free for narrow engines, but an engine of 16 on
    # nodes of 8 takes 2 whole nodes after the trainer's last node): engines on nodes 1-2 and 3-4
    plan = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "rollout.num_gpus=32",
                           "rollout.gpus_per_engine=16", "cluster.num_nodes=5"]))
    assert (plan.num_engines, plan.nodes_per_engine, plan.num_nodes) == (2, 2, 5)
    assert plan.engine_slots(0) == [Slot(n, g, "engine", 0) for n in (1, 2) for g in range(8)]
    assert plan.engine_slots(1) == [Slot(n, g, "engine", 1) for n in (3, 4) for g in range(8)]
    # a trainer of 4 GPUs leaves node 0 half free: the wide engine still starts on node 1
    plan = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "train.gpus_per_node=4",
                           "rollout.num_gpus=16", "rollout.gpus_per_engine=16", "cluster.num_nodes=3"]))
    assert {s.node for s in plan.engine_slots(0)} == {1, 2} and plan.nodes_per_engine == 2


def test_a_colocated_engine_wider_than_a_node_spans_whole_trainer_nodes():
    plan = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.num_nodes=4", "cluster.num_nodes=4",
                           "rollout.gpus_per_engine=16"]))
    assert (plan.num_engines, plan.nodes_per_engine, plan.weight_sync) == (2, 2, "disk")  # auto: no IPC across nodes
    assert [(s.node, s.gpu) for s in plan.engine_slots(1)] == [(n, g) for n in (2, 3) for g in range(8)]
    assert make_plan(load(["hardware=h100", "model=qwen3-0.6b"])).nodes_per_engine == 1


def test_plan_prints_the_nodes_an_engine_spans(capsys):
    from rlrun.cli import main

    assert main(["plan", "hardware=h100", "model=qwen3-0.6b", "train.num_nodes=2", "cluster.num_nodes=2",
                 "rollout.gpus_per_engine=16"]) == 0
    assert "rollout: 1 engine(s) x 16 GPU(s) on 2 nodes each (one server process per node)" in capsys.readouterr().out


def test_moe_params_per_gpu_split_experts_over_ep():
    plan = make_plan(load(["model=qwen3-30b-a3b", "hardware=h200"]))  # TP 4, EP 8
    assert round(plan.params_total / 1e9, 1) == 30.5 and round(plan.params_active / 1e9, 1) == 3.4
    # 48 layers x 128/8 experts x 3*2048*768 on every rank (expert-tensor-parallel 1)
    experts_per_gpu = 48 * 16 * 3 * 2048 * 768
    assert plan.memory["trainer_params_per_gpu"] > experts_per_gpu
    assert plan.memory["trainer_params_per_gpu"] - experts_per_gpu < 0.4e9


# ---- activation memory, calibrated on one H100 (docs/benchmarks.md, 2026-11-22) ----------------------------
# bench/megatron_mfu.py's overrides (the bench imports torch, so they are repeated here): one packed 4096-token
# micro-batch, TP 1, megatron backend on one H100.
BENCH = ["hardware=h100", "train.backend=megatron", "train.gradient_accumulation_fusion=false",
         "train.max_tokens_per_gpu=4096", "train.log_probs_max_tokens_per_gpu=4096", "rollout.max_response_len=1024",
         "eval.max_response_len=1024", "train.gpus_per_node=1", "rollout.num_gpus=1", "parallelism=tp1",
         "rollout.gpus_per_engine=1"]
RECOMPUTE = ["train.recompute.granularity=full", "train.recompute.method=uniform", "train.recompute.num_layers=1"]
# megatron backend: logits built in 512 MiB fp32 chunks; peak = chunk logits + softmax (2 x 512 MiB), the chunk's
# bf16 gradient (256 MiB), and the output weight's gradient as fp32 accumulator + bf16 result (6 B x vocab x h)
def logits_peak(h, tp=1):
    return 2.5 * 512 * 2**20 + 6 * 151936 // tp * h


def test_qwen3_1p7b_activations_by_hand_within_15_percent_of_the_h100():
    from rlrun.config.memory import estimate, layer_bytes_per_token
    cfg = load(["model=qwen3-1.7b"] + BENCH)
    # h 2048, q 16*128 = 2048, k = v 8*128 = 1024, ffn 6144: norms 8h, qkv out 2(q+k+v), rotated q,k 2(q+k),
    # attention out 2q, SwiGLU 10f
    layer = 8 * 2048 + 2 * (2048 + 1024 + 1024) + 2 * (2048 + 1024) + 2 * 2048 + 10 * 6144
    assert layer == layer_bytes_per_token(cfg) == 47 * 2048
    m = estimate(cfg)
    act = 4096 * (28 * layer + 4 * 2048) + logits_peak(2048)  # + final norm's input and output
    assert m.trainer_activations == pytest.approx(act / GiB)
    assert m.trainer_weights + m.trainer_grads + m.trainer_optimizer == pytest.approx(18 * 1_720_574_976 / GiB)
    measured = 43.0  # GiB, torch.cuda.max_memory_allocated (bench/megatron_mfu.py, H100, 2026-11-22 13:12 UTC)
    assert m.trainer_total == pytest.approx(42.14, abs=0.01)
    assert abs(m.trainer_total - measured) / measured < 0.15


def test_qwen3_4b_full_recompute_fits_one_h100_as_measured():
    from rlrun.config.memory import estimate
    cfg = load(["model=qwen3-4b"] + RECOMPUTE + BENCH)
    # layer inputs of 36 uniform groups of 1 + one layer recomputed (h 2560, q 4096, k = v 1024, ffn 9728)
    one_layer = 8 * 2560 + 2 * (4096 + 2048) + 2 * (4096 + 1024) + 2 * 4096 + 10 * 9728
    act = 4096 * (36 * 2 * 2560 + one_layer + 4 * 2560) + logits_peak(2560)
    m = estimate(cfg)
    assert m.trainer_activations == pytest.approx(act / GiB)
    measured = 71.8  # GiB on an 80 GB H100 (79.2 usable): it ran, 2026-11-22 13:19 UTC; before chunked logits: OOM
    assert m.trainer_total < 79.2 and abs(m.trainer_total - measured) / measured < 0.15
    # bf16 grads (train.fp32_grads=false) save 2 B/param: the fused AdamW kernel reads them as they are (no fp32
    # copy of the grad shard); bf16 Adam moments (optim.state_dtype=bf16) save 4 more: 18 -> 12 B/param.
    n = 4_022_468_096
    bf16 = estimate(load(["model=qwen3-4b", "train.fp32_grads=false"] + RECOMPUTE + BENCH))
    assert m.trainer_grads - bf16.trainer_grads == pytest.approx(2 * n / GiB)
    assert bf16.trainer_activations == m.trainer_activations and bf16.trainer_total < m.trainer_total
    lean = estimate(load(["model=qwen3-4b", "train.fp32_grads=false", "optim.state_dtype=bf16"] + BENCH))
    assert lean.trainer_weights + lean.trainer_grads + lean.trainer_optimizer == pytest.approx(12 * n / GiB)


def test_seed_activations_shard_over_tp_with_sequence_parallel(seed):
    # TP 2 + SP, full recompute (uniform, 1 layer), dynamic batching at 9216 tokens per GPU
    one_layer = 8 * 2560 // 2 + 2 * (3 * 4096 // 2 + 3 * 1024 // 2) + 10 * 9728 // 2
    per_token = 36 * 2560 + one_layer + 2 * 2560
    assert seed.memory["trainer_activations"] == pytest.approx((9216 * per_token + logits_peak(2560, tp=2)) / GiB)


def test_pipeline_first_stage_holds_pp_micro_batches():
    from rlrun.config.memory import estimate
    cfg = load(["model=llama3.1-8b"] + BENCH + ["parallelism.pp=4", "train.gpus_per_node=4", "rollout.num_gpus=4"])
    # h 4096 = q, k = v 8*128 = 1024, ffn 14336; 8 layers per stage
    layer = 8 * 4096 + 2 * (2 * 4096 + 4096) + 2 * (2 * 1024 + 1024) + 10 * 14336
    first = 4 * 8 * layer * 4096  # 1F1B: 4 micro-batches of the first 8 layers in flight
    last = 4096 * (8 * layer + 4 * 4096 + 128256 * 20)  # one micro-batch + final norm + logits
    assert first > last and estimate(cfg).trainer_activations == pytest.approx(first / GiB)


def test_cuda_graphs_note_says_when_graphs_replay():
    with_offload = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.backend=megatron", "train.cuda_graphs=true",
                                   "rollout.mem_fraction_static=0.7"]))  # a pool that pushes the trainer out
    assert any("train.cuda_graphs" in n and "dropped at every offload" in n for n in with_offload.notes)
    without = make_plan(load(["hardware=h100", "model=qwen3-0.6b", "train.backend=megatron", "train.cuda_graphs=true",
                              "train.offload=false", "rollout.offload=false"]))
    assert any("train.cuda_graphs" in n and "offload" not in n for n in without.notes)
    assert not any("cuda_graphs" in n for n in make_plan(load(["hardware=h100", "model=qwen3-0.6b"])).notes)


def test_plan_that_does_not_fit_says_what_bf16_moments_and_grads_would_save():
    one_h100 = ["model=qwen3-4b", "hardware=h100", "train.backend=megatron", "train.gpus_per_node=1",
                "rollout.num_gpus=1", "rollout.gpus_per_engine=1", "parallelism=tp1",
                "train.max_tokens_per_gpu=4096", "rollout.max_response_len=1024"]
    fat = make_plan(load(one_h100))
    n = 4_022_468_096
    assert not fat.fits
    hint = next(note for note in fat.notes if note.startswith("memory: estimated peak"))
    assert f"optim.state_dtype=bf16 train.fp32_grads=false would save {(4 + 2) * n / GiB:.1f} GiB" in hint
    lean = make_plan(load(one_h100 + ["optim.state_dtype=bf16", "train.fp32_grads=false"]))
    assert lean.fits and lean.memory["peak"] == pytest.approx(fat.memory["peak"] - 6 * n / GiB)
