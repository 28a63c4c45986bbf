"""The plan's cost model (rlrun.config.cost) and its calibration (rlrun.config.calibrate): the formulas on
hand-computed values (constants chosen so each term can be computed by hand), the KV check, the basis of
estimates, async overlap, layout advice, the refit from a run dir, the CLI and the report's table.
Float tolerances: rel 1e-9 where the neglected terms are < 1e-12 s (huge bandwidth / FLOP/s constants); the
calibration writes 4 significant digits, hence rel 1e-3 there."""
from __future__ import annotations

import json
import math

import pytest
import yaml

from rlrun.cli import main
from rlrun.config import load
from rlrun.config.calibrate import calibrate, write_overlay
from rlrun.config.cost import PHASES, advise, load_table, measured_phases, predict, predicted_phases
from rlrun.config.memory import estimate
from rlrun.config.plan import make_plan, weight_sync
from rlrun.sweep import ranked

HUGE = 1e30


@pytest.fixture(autouse=True)
def no_fitted_overlay(tmp_path, monkeypatch):
    """The shipped table only: a conf/calibration.fitted.yaml of this checkout must not change the numbers."""
    monkeypatch.setenv("RLRUN_CALIBRATION", str(tmp_path / "none.yaml"))


def _table(**over) -> dict:
    """A cpu entry whose physical terms vanish (bandwidth and FLOP/s huge): only the fixed costs remain."""
    entry = {"basis": "measured", "source": "test", "bandwidth_gb_s": HUGE,
             "assume": {"prompt_tokens": 16, "response_fraction": 1.0, "eval_prompts": 6},
             "step_overhead_s": 0.01, "startup_s": 0.0,
             "engines": {"hf": {"request_s": 0.002, "step_layer_s": 0.001, "bandwidth_eff": 1.0, "mfu": HUGE,
                                "offload_s": 0.3},
                         "sglang": {"request_s": 0.002, "step_layer_s": 0.001, "bandwidth_eff": 1.0, "mfu": HUGE,
                                    "offload_s": 0.3}},
             "backends": {"torch": {"train_fixed_s": 0.1, "micro_batch_layer_s": 0.01, "mfu": HUGE, "optimizer_eff": 1.0},
                          "megatron": {"train_fixed_s": 0.1, "micro_batch_layer_s": 0.01, "mfu": HUGE,
                                       "optimizer_eff": 1.0}},
             "weight_sync": {"tensor": {"gb_per_s": 0.001, "fixed_s": 0.02},
                             "distributed": {"gb_per_s": 0.001, "fixed_s": 0.02}},
             "offload": {"host_gb_per_s": HUGE}, "save": {"gb_per_s": 0.01, "fixed_s": 0.05}}
    for k, v in over.items():
        entry[k] = {**entry.get(k, {}), **v} if isinstance(v, dict) else v
    return {"fallback": "cpu", "cpu": entry}


def test_default_job_fixed_costs_by_hand():
    """Tiny model: 78,208 params (tied, so the matmul count is the same), 2 layers; 16 prompts x 8 = 128 requests of
    1 token, max_concurrency 64 -> 2 decode steps; dynamic batching: ceil(128 x 17 / 512) = 5 micro-batches."""
    cfg = load([])
    c = predict(cfg, "tensor", _table())
    ph = c["phases_s"]
    assert c["generation"]["decode_steps"] == 2.0 and c["generation"]["concurrency"] == 64
    assert ph["rollout"] == pytest.approx(128 * 0.002 + 2 * 2 * 0.001, rel=1e-9)          # 0.260
    assert ph["log_probs"] == 0.0                          # GRPO, one optimizer step, no KL: no extra pass
    assert ph["train"] == pytest.approx(0.1 + 5 * max(2 * 0.01, 0.0), rel=1e-9)           # 0.200
    assert ph["weight_sync"] == pytest.approx(0.02 + 78208 * 4 / 1e6, rel=1e-9)           # fp32 export: 0.332832
    assert c["events_s"]["save"] == pytest.approx(0.05 + 78208 * 12 / 1e7, rel=1e-9)      # torch checkpoint 12 B/param
    assert ph["save"] == pytest.approx(c["events_s"]["save"] / 20, rel=1e-9)              # save_interval 20
    assert ph["offload"] == 0.0 and ph["eval"] == 0.0
    step = 0.26 + 0.2 + 0.332832 + (0.05 + 0.0938496) / 20 + 0.01
    assert c["step_s"] == pytest.approx(step, rel=1e-9)
    assert c["step_core_s"] == pytest.approx(step - ph["save"], rel=1e-9)
    assert c["run_h"] == pytest.approx(60 * step / 3600, abs=1e-4)  # the final save is the 3rd interval's
    assert c["gpus"] == 1 and c["basis"] == "measured"


def test_memory_terms_by_hand():
    """Only the bandwidth terms (1 GB/s): a decode step reads the bf16 weights (2 x 78,208 B), each generated token
    the KV of its mean context (16 + 1/2 tokens x 256 B); 2 steps, 128 tokens."""
    t = _table(bandwidth_gb_s=1.0, engines={"hf": {"request_s": 0.0, "step_layer_s": 0.0, "bandwidth_eff": 1.0,
                                                   "mfu": HUGE, "offload_s": 0.0}})
    c = predict(load([]), "tensor", t)
    assert c["phases_s"]["rollout"] == pytest.approx((2 * 2 * 78208 + 128 * 16.5 * 256) / 1e9, rel=1e-6)


def test_micro_batch_is_paced_by_the_slower_of_host_and_gpu():
    """mfu 1e-6 of 0.5 TFLOP/s: 5 micro-batches of 128 x 17 x 6 x 78,208 (+ attention 6 x 2 x 64 x 17) FLOPs / 5
    each, far above the host's 2 x 0.01 s: the GPU term sets the pace."""
    t = _table(backends={"torch": {"train_fixed_s": 0.0, "micro_batch_layer_s": 0.01, "mfu": 1e-6,
                                   "optimizer_eff": 1.0}})
    c = predict(load([]), "tensor", t)
    flops = 128 * 17 * (6 * 78208 + 6 * 2 * 64 * 17)
    assert c["phases_s"]["train"] == pytest.approx(flops / (0.5e12 * 1e-6), rel=1e-6)


def test_kv_capacity_queues_and_warns():
    cfg = load(["hardware=h100", "train.backend=megatron", "train.gpus_per_node=1", "rollout.engine=sglang", "rollout.mem_fraction_static=0.0001",
                "rollout.max_response_len=512", "rollout.max_concurrency=256"])
    mem = estimate(cfg)
    c = predict(cfg, "tensor", _table(), mem)
    g = c["generation"]
    per_seq = 16 + 512  # toy prompts (max_prompt_len 16), response_fraction 1
    assert g["kv_tokens"] == mem.kv_tokens and g["kv_sequences"] == mem.kv_tokens // per_seq
    assert g["concurrency"] == g["kv_sequences"] < g["concurrency_wanted"] == 256  # 32 prompts x 8 (h100 defaults)
    assert any("requests will queue" in w and "rollout.mem_fraction_static" in w for w in c["warnings"])
    roomy = predict(load(["hardware=h100", "train.backend=megatron", "train.gpus_per_node=1", "rollout.engine=sglang",
                          "rollout.max_response_len=512", "rollout.max_concurrency=256"]), "tensor", _table())
    assert roomy["generation"]["concurrency"] == 256 and not roomy["warnings"]
    assert roomy["phases_s"]["rollout"] < c["phases_s"]["rollout"]


def test_max_concurrency_below_the_kv_cache_is_reported_with_its_gain():
    cfg = load(["hardware=h100", "train.backend=megatron", "train.gpus_per_node=1", "rollout.engine=sglang", "rollout.max_response_len=512",
                "rollout.max_concurrency=16"])
    c = predict(cfg, "tensor", _table())
    (w,) = c["warnings"]
    assert "rollout.max_concurrency 16 caps" in w and "rollout.max_concurrency=256 would cut generation" in w


def test_async_overlaps_generation_with_the_trainer():
    cfg = load(["experiment=tiny-grpo-async-cpu"])
    c = predict(cfg, weight_sync(cfg), _table())
    ph, a = c["phases_s"], c["async"]
    trainer = ph["log_probs"] + ph["train"] + ph["weight_sync"] + ph["eval"] + ph["save"]
    producer = ph["rollout"] + ph["weight_sync"]  # the engines pause for the push
    assert a["producer_s"] == producer and a["trainer_s"] == pytest.approx(trainer)
    assert c["step_s"] == pytest.approx(max(producer, trainer) + 0.01, rel=1e-6)
    assert a["bubble_s"] == pytest.approx(abs(producer - trainer)) and a["hidden_s"] == min(producer, trainer)
    every2 = predict(load(["experiment=tiny-grpo-async-cpu", "rollout.update_weights_interval=2"]), "distributed", _table())
    assert every2["phases_s"]["weight_sync"] == pytest.approx(predict(cfg, "distributed", _table())["phases_s"]
                                                              ["weight_sync"] / 2)


def test_seed_recipe_is_an_estimate_with_its_basis():
    cfg = load(["experiment=qwen3-4b-grpo-mi300x"])
    c = make_plan(cfg).cost
    assert c["basis"] == "estimate" and c["hardware"] == "mi300x"
    assert "no measurement on mi300x" in c["note"] and "h200" in c["note"] and "1307.4" in c["note"] and "5300" in c["note"]
    assert c["step_s"] > 0 and c["gpus"] == 8
    assert c["gpu_hours"] == pytest.approx(c["run_h"] * 8, rel=1e-3)
    assert any("assumed" in a for a in c["assumptions"])  # dapo has no prompt-length filter


def test_an_estimate_scaled_from_a_fitted_profile_gets_the_whole_chain():
    """mi300x scaled_from h200, itself h100's constants with fitted scales: the estimate gets h100's constants, h200's
    scales and step overhead, and its own bandwidth; what an entry says of itself (source, fitted_from) is not lent;
    a cycle of scaled_from ends."""
    from rlrun.config.cost import constants

    table = load_table()
    c = constants(load(["experiment=qwen3-4b-grpo-mi300x"]), table).c
    assert c["bandwidth_gb_s"] == 5300 and table["h200"]["bandwidth_gb_s"] == 4800
    assert c["scale"] == table["h200"]["scale"] and c["step_overhead_s"] == table["h200"]["step_overhead_s"]
    assert c["engines"] == table["h100"]["engines"]  # h200's entry has no constants of its own
    assert not {"source", "fitted_from", "scaled_from", "basis"} & set(c)
    loop = {"a": {"basis": "estimate", "scaled_from": "b", "x": 1}, "b": {"scaled_from": "a", "x": 2, "y": 3}}
    assert constants(load(["hardware=h100", "hardware.name=a"]), loop).c == {"x": 1, "y": 3}


def test_a_profile_without_an_entry_says_whose_constants_it_borrows():
    c = predict(load(["hardware=h100", "hardware.name=mystery", "train.backend=megatron"]), "tensor", load_table())
    assert c["basis"] == "estimate" and c["note"].startswith("no calibration for mystery: h100's")


def test_a_kind_without_a_measurement_is_an_estimate():
    table = _table()
    del table["cpu"]["engines"]["hf"]
    table["h100"] = load_table()["h100"]
    c = predict(load([]), "tensor", {**table, "fallback": "h100"})
    assert c["basis"] == "estimate" and "no hf measurement on cpu: h100's engines constants" in c["note"]
    assert c["phases_s"]["rollout"] > 128 * load_table()["h100"]["engines"]["hf"]["request_s"]


def test_advice_ranks_the_splits_of_the_gpus():
    cfg = load(["hardware=h100", "train.backend=megatron", "rollout.engine=sglang", "train.gpus_per_node=2",
                "rollout.gpus_per_engine=1", "rollout.max_response_len=512"])
    rows = advise(cfg, weight_sync(cfg), load_table())
    assert [r["step_s"] for r in rows] == sorted(r["step_s"] for r in rows)
    layouts = {r["layout"] for r in rows}
    assert layouts == {"colocated, 2 GPUs", "1 trainer + 1 rollout, sync", "1 trainer + 1 rollout, async (max_staleness 1)"}
    (cur,) = [r for r in rows if r["current"]]
    assert cur["layout"] == "colocated, 2 GPUs" and cur["gain"] == 1.0


def _fake_run(tmp_path, cfg, rows) -> object:
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    (d / "plan.json").write_text(json.dumps(make_plan(cfg).to_dict()))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_calibrate_refits_the_scales_and_the_overlay_reproduces_the_run(tmp_path):
    cfg = load(["checkpoint.save_interval=2"])
    pred = predicted_phases(predict(cfg, "tensor", load_table()))
    core = 2 * pred["rollout"] + 0.5 * pred["train"] + pred["weight_sync"] + 0.05
    rows = [{"step": 0, "time/rollout_s": 9.0, "time/train_s": 9.0, "time/step_s": 99.0}]  # warm-up, left out
    for s in (1, 2):
        rows.append({"step": s, "time/rollout_s": 2 * pred["rollout"], "time/train_s": 0.5 * pred["train"],
                     "time/weight_sync_s": pred["weight_sync"], "rollout/response_len_mean": 1.0,
                     "time/step_s": core + (3 * pred["save"] if s == 2 else 0.0),
                     **({"time/save_s": 3 * pred["save"]} if s == 2 else {})})
    run = _fake_run(tmp_path, cfg, rows)
    overlay, report = calibrate([run])
    fit = overlay["cpu"]
    assert fit["basis"] == "measured" and fit["fitted_from"] == [str(run)]
    assert fit["scale"]["rollout"] == pytest.approx(2.0, rel=1e-3) and fit["scale"]["train"] == pytest.approx(0.5, rel=1e-3)
    assert fit["scale"]["weight_sync"] == pytest.approx(1.0, rel=1e-3) and fit["scale"]["save"] == pytest.approx(3.0, rel=1e-3)
    assert fit["step_overhead_s"] == pytest.approx(0.05, rel=1e-3) and fit["assume"]["response_fraction"] == 1.0
    after = {r["phase"]: r for r in report}
    assert after["step_core"]["after_s"] == pytest.approx(core, rel=2e-3)
    path = tmp_path / "fitted.yaml"
    write_overlay(overlay, path)
    again = predict(cfg, "tensor", load_table(path))
    assert again["phases_s"]["rollout"] == pytest.approx(2 * pred["rollout"], rel=1e-3)
    assert again["basis"] == "measured" and "fitted by rlrun plan --calibrate" in again["note"]


def test_calibrate_cli_writes_where_it_says(tmp_path, capsys):
    cfg = load([])
    rows = [{"step": s, "time/rollout_s": 0.2, "time/train_s": 0.1, "time/weight_sync_s": 0.03, "time/step_s": 0.34}
            for s in range(3)]
    run = _fake_run(tmp_path, cfg, rows)
    out = tmp_path / "cal.yaml"
    assert main(["plan", "--calibrate", str(run), "--out", str(out)]) == 0
    assert f"wrote the fitted constants of cpu to {out}" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["cpu"]["scale"]["rollout"] > 0
    assert main(["plan", "--calibrate"]) == 2
    assert main(["plan", "--calibrate", str(tmp_path / "nowhere")]) == 2


def test_plan_shows_the_prediction(capsys):
    assert main(["plan", "experiment=qwen3-4b-grpo-mi300x"]) == 0
    out = capsys.readouterr().out
    assert "predicted time per rollout step" in out and "ESTIMATE: mi300x" in out and "GPU-hours" in out
    assert "basis: estimate: no measurement on mi300x" in out and out.count("advice:") == 1
    assert main(["plan", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert set(PHASES) == set(cost["phases_s"]) and cost["advice"][0]["layout"] == "colocated, 1 GPU"


def test_sweep_points_rank_by_predicted_gpu_hours():
    rows = [{"index": 0, "gpu_h": 3.0, "step_s": 2.0}, {"index": 1, "gpu_h": None, "step_s": None},
            {"index": 2, "gpu_h": 1.0, "step_s": 5.0}]
    assert [(r["rank"], r["index"]) for r in ranked(rows)] == [(1, 2), (2, 0), (3, 1)]


def test_measured_phases_leave_out_the_warm_up_and_count_events_per_event():
    rows = [{"time/rollout_s": 5.0, "time/step_s": 9.0},
            {"time/rollout_s": 1.0, "time/save_s": 4.0, "time/step_s": 6.0},
            {"time/rollout_s": 3.0, "time/step_s": 3.5},
            {"time/rollout_s": 30.0, "time/step_s": 33.0}]  # a stalled step: the median does not follow it
    m = measured_phases(rows)
    assert m == {"rollout": 3.0, "save": 4.0, "step_core": 3.5}  # medians of (1, 3, 30), (4), (6 - 4, 3.5, 33)
    assert math.isclose(measured_phases([{"time/produce_s": 2.0, "time/rollout_s": 0.1}])["rollout"], 2.0)


def test_report_puts_predicted_next_to_measured(tmp_path):
    from rlrun.report import cost_rows, load_run

    cfg = load([])
    pred = predicted_phases(make_plan(cfg).cost)
    rows = [{"step": s, "time/rollout_s": 2 * pred["rollout"], "time/step_s": 1.0} for s in range(3)]
    got = {r[0]: r for r in cost_rows(load_run(_fake_run(tmp_path, cfg, rows)))}
    assert got["rollout"][3] == "2"


def test_the_device_comparison_tool_runs_leave_one_out(tmp_path):
    """tools/device/predict_vs_measured.py (the GPU line's table) on two CPU run dirs: each predicted from the other."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    dirs = []
    for i, (cfg, t) in enumerate([(load([]), 0.2), (load(["rollout.rollout_batch_size=8"]), 0.1)]):
        rows = [{"step": s, "time/rollout_s": t, "time/train_s": 0.1, "time/step_s": t + 0.15} for s in range(3)]
        sub = tmp_path / str(i)
        sub.mkdir()
        dirs.append(str(_fake_run(sub, cfg, rows)))
    r = subprocess.run([sys.executable, str(root / "tools/device/predict_vs_measured.py"), *dirs, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 0, r.stderr
    table = (tmp_path / "predict.md").read_text()
    assert table.count("| 0 (tiny 16x8x1) | rollout | 0.200 |") == 1 and "| 1 (tiny 8x8x1) | rollout | 0.100 |" in table
    assert "worst leave-one-out error per phase" in table and "worst fitted to all error per phase" in table
    assert yaml.safe_load((tmp_path / "calibration.fitted.yaml").read_text())["cpu"]["fitted_from"] == dirs


def test_the_longest_response_sets_the_drain():
    """Exponential lengths: the longest of n is the mean x H(n) (H(4) = 25/12), capped at max_response_len; a run
    that truncated (n x fraction >= 1/2) drained to the limit."""
    from rlrun.config.cost import longest_response

    assert longest_response(10.0, 512, 4) == pytest.approx(10 * 25 / 12, rel=1e-12)
    assert longest_response(300.0, 512, 4) == 512.0
    assert longest_response(10.0, 512, 256, truncated=0.002) == 512.0            # 0.51 of a request truncated
    assert longest_response(10.0, 512, 256, truncated=0.001) == pytest.approx(10 * sum(1 / i for i in range(1, 257)))
    # above 1,000 requests the harmonic number's expansion ln n + gamma + 1/2n - 1/12n^2 (next term 1/120n^4)
    assert longest_response(1.0, 10**6, 5000) == pytest.approx(sum(1 / i for i in range(1, 5001)), rel=1e-12)


def test_a_measured_workload_replaces_the_assumed_length():
    """The default job's shape with max_response_len 64: measured mean 4 tokens, nothing truncated: 128 requests at
    concurrency 64 -> D = 128 x 4 / 64 + (4 x H(128) - 4) decode steps of 2 layers x 0.001 s (bandwidth and FLOP/s
    huge); with the assumed fraction 1.0 the drain runs to 64."""
    cfg = load(["rollout.max_response_len=64"])
    h128 = sum(1 / i for i in range(1, 129))
    got = predict(cfg, "tensor", _table(), workload={"response_len": 4.0, "truncated_frac": 0.0})
    steps = 128 * 4 / 64 + (4 * h128 - 4)
    assert got["generation"]["decode_steps"] == pytest.approx(steps, abs=0.05)
    assert got["phases_s"]["rollout"] == pytest.approx(128 * 0.002 + steps * 2 * 0.001, rel=1e-9)
    assumed = predict(cfg, "tensor", _table())
    assert assumed["generation"]["decode_steps"] == 128 * 64 / 64 + 0  # the mean is the limit: no drain beyond it
    truncated = predict(cfg, "tensor", _table(), workload={"response_len": 4.0, "truncated_frac": 0.01})
    assert truncated["generation"]["decode_steps"] == pytest.approx(128 * 4 / 64 + 60)


def test_a_decode_step_is_the_slower_of_the_kernel_chain_and_the_weight_read():
    """2 layers x 0.001 s against 2 x 78,208 B at 1e-4 GB/s (1.56 s): the weight read sets the step; at 1e3 GB/s
    (0.16 us) the layers do. One decode step (responses of 1 token), 128 requests at 0 s."""
    eng = {"request_s": 0.0, "step_layer_s": 0.001, "bandwidth_eff": 1.0, "mfu": HUGE, "offload_s": 0.0}
    cfg = load([])
    slow = predict(cfg, "tensor", _table(bandwidth_gb_s=1e-4, engines={"hf": eng}))
    kv = 128 * 16.5 * 256 / 1e5  # each token's KV read at the same bandwidth
    assert slow["phases_s"]["rollout"] == pytest.approx(2 * 2 * 78208 / 1e5 + kv, rel=1e-9)
    fast = predict(cfg, "tensor", _table(bandwidth_gb_s=1e3, engines={"hf": eng}))
    assert fast["phases_s"]["rollout"] == pytest.approx(2 * 0.002, rel=1e-3)


def test_train_and_weight_sync_components_by_hand():
    """sample_s per sample and DP rank (128 samples), layer_s per layer of the pushed model (2 layers)."""
    t = _table(backends={"torch": {"train_fixed_s": 0.1, "sample_s": 0.001, "micro_batch_layer_s": 0.01, "mfu": HUGE,
                                   "optimizer_eff": 1.0}},
               weight_sync={"tensor": {"gb_per_s": 0.001, "fixed_s": 0.02, "layer_s": 0.005}})
    c = predict(load([]), "tensor", t)
    assert c["parts_s"]["train"] == pytest.approx({"fixed": 0.1, "sample": 0.128, "micro": 5 * 2 * 0.01,
                                                   "optimizer": 0.0}, abs=1e-12)
    assert c["phases_s"]["train"] == pytest.approx(0.328, rel=1e-9)
    assert c["phases_s"]["weight_sync"] == pytest.approx(0.02 + 2 * 0.005 + 78208 * 4 / 1e6, rel=1e-9)


def test_component_scales_apply_per_component():
    """scale.rollout {request: 2, '*': 0.5}: the request part doubles, the decode steps halve."""
    c = predict(load([]), "tensor", _table(scale={"rollout": {"request": 2.0, "*": 0.5}}))
    assert c["phases_s"]["rollout"] == pytest.approx(2 * 128 * 0.002 + 0.5 * 2 * 2 * 0.001, rel=1e-9)


def test_fit_scales_by_hand():
    """Two runs whose truth is request x 2, step x 1: (1 + 1) -> 3 s and (1 + 3) -> 5 s. Without the ridge the fit
    is exact; a huge ridge keeps both at the common scale g = sqrt(3/2 x 5/4); one run: g alone."""
    from rlrun.config.calibrate import fit_scales

    runs = [({"request": 1.0, "step": 1.0}, 3.0), ({"request": 1.0, "step": 3.0}, 5.0)]
    g = math.sqrt(1.5 * 1.25)
    exact = fit_scales(runs, ridge=0.0)
    assert exact["request"] == pytest.approx(2.0, abs=1e-4) and exact["step"] == pytest.approx(1.0, abs=1e-4)
    assert exact["*"] == pytest.approx(g, abs=1e-4)
    stiff = fit_scales(runs, ridge=1e9)
    assert stiff["request"] == pytest.approx(g, abs=1e-4) and stiff["step"] == pytest.approx(g, abs=1e-4)
    assert fit_scales(runs[:1]) == pytest.approx(1.5, abs=1e-4)
    # a component carrying less than 1/1000 of every run's time is not fitted: the phase's number alone
    assert fit_scales([({"request": 1.0, "step": 1e-6}, 2.0), ({"request": 2.0, "step": 0.0}, 4.0)]) == 2.0


def test_calibrate_takes_the_profile_the_runs_ran_on(tmp_path):
    """An h100 recipe run on an H200: --hardware h200 fits the h200 entry."""
    cfg = load([])
    rows = [{"step": s, "time/rollout_s": 0.2, "time/train_s": 0.1, "time/step_s": 0.34} for s in range(3)]
    run = _fake_run(tmp_path, cfg, rows)
    overlay, report = calibrate([run], hardware="h200")
    assert set(overlay) == {"h200"} and {r["hardware"] for r in report} == {"h200"}
    assert main(["plan", "--calibrate", str(run), "--hardware", "h200", "--out", str(tmp_path / "c.yaml")]) == 0
    assert set(yaml.safe_load((tmp_path / "c.yaml").read_text())) == {"h200"}
    assert main(["plan", "--hardware", "h200"]) == 2  # without --calibrate it would be ignored: refused


H200_RUNS = ["steps-qwen3-0.6b/20261129-004417-433670", "steps-qwen3-1.7b/20261129-004704-661496",
             "r3-false/20261129-005848-799869", "steps-qwen3-4b/20261129-035805-704380"]


def _h200_runs():
    from pathlib import Path

    from rlrun.config.calibrate import load_run

    root = Path(__file__).resolve().parents[1] / "data/cost_runs/h200-2026-11-29"
    out = []
    for name in H200_RUNS:
        cfg, plan, rows = load_run(root / name)
        cfg = cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"name": "h200"})})
        out.append((root / name, cfg, plan["weight_sync"], measured_phases(rows)))
    return out


def test_the_shipped_h200_entry_is_the_fit_to_the_four_h200_runs():
    """conf/calibration.yaml's h200 scales are `rlrun plan --calibrate --hardware h200` on the four runs of
    tests/data/cost_runs (4 significant digits written, hence rel 1e-3); fitted to all, each run's step without
    eval and save is within 20% of the measured median and each phase within 30% (the issue's acceptance);
    leave-one-out (the three other runs fit, this one predicted) each dense Qwen3 shape's step is within 30%: the
    Qwen3-4B run, measured after the three others were fitted, was predicted 27% high, 0.6B/1.7B 11%/13% low. The
    tiny-moe copy task (3-token responses: request-bound) is the only run in its regime, so predicted from the dense
    shapes alone its step is 40% high (its rollout 63%): it is fitted, not a leave-one-out case. Every phase's
    errors: docs/benchmarks.md, "Ninth session on the lent GPUs"."""
    from rlrun.config.cost import workload

    runs = _h200_runs()
    shipped = load_table()
    overlay, _ = calibrate([d for d, *_ in runs], shipped, hardware="h200")
    for ph, s in overlay["h200"]["scale"].items():
        assert s == pytest.approx(shipped["h200"]["scale"][ph], rel=1e-3), ph
    assert overlay["h200"]["step_overhead_s"] == pytest.approx(shipped["h200"]["step_overhead_s"], rel=1e-3)
    for d, cfg, transport, meas in runs:
        got = predicted_phases(predict(cfg, transport, shipped, workload=workload(meas)))
        assert got["step_core"] == pytest.approx(meas["step_core"], rel=0.2), d
        for ph in ("rollout", "train", "weight_sync", "offload", "save"):
            assert got[ph] == pytest.approx(meas[ph], rel=0.3), (d, ph)
        if cfg.model.name.startswith("qwen3-") and "moe" not in cfg.model.name:
            others = [o for o, *_ in runs if o != d]
            fit = calibrate(others, shipped, hardware="h200")[0]["h200"]
            loo = predict(cfg, transport, {**shipped, "h200": {**shipped["h200"], **fit}}, workload=workload(meas))
            assert loo["step_core_s"] == pytest.approx(meas["step_core"], rel=0.3), d


def test_eval_is_fitted_on_top_of_the_rollouts_scales(tmp_path):
    """Eval is generation: a run whose rollout and eval both took 2x the prediction fits rollout 2 and eval 1 (the
    rollout's scale already explains it), and the refit predicts the eval event at 2x."""
    cfg = load(["eval.interval=1", "eval.datasets=[{name: toy, path: toy.jsonl, rm_type: exact_match}]"])
    c = predict(cfg, "tensor", load_table())
    pred = predicted_phases(c)
    assert pred["eval"] > 0
    rows = [{"step": s, "time/rollout_s": 2 * pred["rollout"], "time/eval_s": 2 * pred["eval"],
             "time/step_s": 2 * pred["rollout"] + 2 * pred["eval"]} for s in range(3)]
    overlay, _ = calibrate([_fake_run(tmp_path, cfg, rows)])
    assert overlay["cpu"]["scale"]["rollout"] == pytest.approx(2.0, rel=1e-3)
    assert overlay["cpu"]["scale"]["eval"] == pytest.approx(1.0, rel=1e-3)
    path = tmp_path / "fitted.yaml"
    write_overlay(overlay, path)
    assert predict(cfg, "tensor", load_table(path))["events_s"]["eval"] == pytest.approx(2 * pred["eval"], rel=1e-3)
