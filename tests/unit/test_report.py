"""`rlrun show` / `rlrun compare`: the HTML report (rendered in headless Chromium: the plots drew), the PNG,
the legend from config differences, and no torch or ray imported."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from rlrun.config import load
from rlrun.config.rundir import write_yaml
from rlrun.data.sample import Sample, Status
from rlrun.records import RecordsWriter
from rlrun.report import compare, label_runs, load_run, show

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def make_run(root, name, overrides=(), steps=4, records=True):
    cfg = load(list(overrides))
    run_dir = root / name
    run_dir.mkdir(parents=True)
    write_yaml(run_dir / "config.yaml", cfg.to_dict())
    write_yaml(run_dir / "overrides.yaml", list(overrides))
    (run_dir / "plan.json").write_text(json.dumps({"world_size": 1}))
    with (run_dir / "metrics.jsonl").open("w") as f:
        for s in range(steps):
            f.write(json.dumps({"step": s, "rollout/reward_mean": s / 4, "rollout/response_len_mean": 2.0 + s,
                                "train/loss": 0.1 * s, "time/step_s": 1.0}) + "\n")
    if records:
        smp = [Sample(prompt="<p>12</p>", prompt_tokens=[1], response="2", response_tokens=[2], loss_mask=[1],
                      reward=1.0, status=Status.COMPLETED, group_id=0)]
        RecordsWriter(run_dir, "sample", 1).write(0, smp, smp)
    return run_dir


def _render(html_path, tmp_path):
    """(number of plotly .main-svg elements in the rendered DOM, screenshot bytes)."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
            f"--user-data-dir={tmp_path / 'chrome'}"]
    dom = subprocess.run([*args, "--dump-dom", html_path.as_uri()], capture_output=True, text=True, timeout=120)
    shot = tmp_path / "shot.png"
    subprocess.run([*args, "--window-size=1200,900", f"--screenshot={shot}", html_path.as_uri()],
                   capture_output=True, timeout=120)
    return dom.stdout.count('class="main-svg"'), shot.read_bytes()


def test_show_writes_report_and_png_and_the_plots_draw(tmp_path, capsys):
    run_dir = make_run(tmp_path, "20260101-000000")
    out = show(run_dir)
    assert out == run_dir / "report.html" and (run_dir / "reward_length.png").is_file()
    page = out.read_text()
    assert "<script" in page and "<script src" not in page  # plotly.js inlined: opens offline
    assert "&lt;p&gt;12&lt;/p&gt;" in page  # the recorded sample, escaped
    table = capsys.readouterr().out
    assert "rollout/reward_mean" in table and "0.75" in table  # last reward 3/4
    svgs, png = _render(out, tmp_path)
    assert svgs >= 1  # plotly drew the figure (it adds .main-svg elements only when it renders)
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    lo, hi = img.getextrema()
    assert hi - lo > 100  # not a blank page


def test_compare_labels_runs_by_config_differences(tmp_path):
    a = make_run(tmp_path, "a", ["optim.lr=1e-6"])
    b = make_run(tmp_path, "b", ["optim.lr=3e-6"])
    runs = [load_run(a), load_run(b)]
    label_runs(runs)
    assert [r.label for r in runs] == ["optim.lr=1e-6", "optim.lr=3e-6"]  # what the user wrote
    (a / "overrides.yaml").unlink()  # a run dir without its overrides: the resolved values that differ
    (b / "overrides.yaml").unlink()
    runs = [load_run(a), load_run(b)]
    label_runs(runs)
    assert [r.label for r in runs] == ["optim.critic_lr=1e-06 optim.lr=1e-06", "optim.critic_lr=3e-06 optim.lr=3e-06"]
    out = compare([a, b], tmp_path / "cmp.html")
    page = out.read_text()
    assert "optim.critic_lr=1e-06 optim.lr=1e-06" in page and "optim.critic_lr=3e-06 optim.lr=3e-06" in page
    svgs, _ = _render(out, tmp_path)
    assert svgs >= 1


def test_a_key_only_one_run_overrides_shows_the_others_resolved_value(tmp_path):
    runs = [load_run(make_run(tmp_path, "a", records=False)),
            load_run(make_run(tmp_path, "b", ["logging.rollout_records=all", "model=tiny"], records=False))]
    label_runs(runs)
    assert [r.label for r in runs] == ["logging.rollout_records=sample model=default",
                                       "logging.rollout_records=all model=tiny"]


def test_identical_configs_are_labelled_by_dir(tmp_path):
    runs = [load_run(make_run(tmp_path, n, records=False)) for n in ("x", "y")]
    label_runs(runs)
    assert [r.label for r in runs] == ["x", "y"]


def test_show_on_a_sweep_dir_compares_its_points(tmp_path):
    root = tmp_path / "multirun" / "20260101"
    pts = [make_run(root, str(i), [f"rollout.n_samples_per_prompt={n}"], records=False) for i, n in enumerate((4, 8))]
    (root / "summary.json").write_text(json.dumps({"points": [{"run_dir": str(p)} for p in pts]}))
    out = show(root)
    assert out == root / "report.html"
    assert "rollout.n_samples_per_prompt=4" in out.read_text()


def test_show_and_compare_import_neither_torch_nor_ray(tmp_path):
    a, b = make_run(tmp_path, "a"), make_run(tmp_path, "b", ["optim.lr=3e-6"])
    code = ("import sys, json; from rlrun.cli import main; "
            f"rc = main(['show', {str(a)!r}]) + main(['compare', {str(a)!r}, {str(b)!r}, '--out', "
            f"{str(tmp_path / 'c.html')!r}]); "
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, 'ray': 'ray' in sys.modules}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"rc": 0, "torch": False, "ray": False}, r.stderr
    assert (tmp_path / "c.html").is_file()


def test_show_refuses_a_dir_that_is_no_run(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "show", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "is not a run dir" in r.stderr and "Traceback" not in r.stderr


def test_a_constant_series_is_drawn_around_its_value(tmp_path):
    """train/lr = 1e-6 on every step: the axis spans 0.5e-6..1.5e-6 (half the value each side), not
    plotly's c-1..c+1 (which drew it at 0); a varying series keeps plotly's autorange."""
    from rlrun.report import RunData, figure

    rows = [{"step": i, "train/lr": 1e-6, "rollout/reward_mean": 0.1 * i} for i in range(4)]
    fig = figure([RunData(tmp_path, rows, label="a")])
    axes = {fig.layout.annotations[i].text: fig.layout[f"yaxis{'' if i == 0 else i + 1}"] for i in range(2)}
    assert list(axes["train/lr"].range) == [0.5e-6, 1.5e-6]
    assert axes["rollout/reward_mean"].range is None
