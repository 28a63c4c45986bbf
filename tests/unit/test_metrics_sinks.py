"""MetricsLogger's views of metrics.jsonl: one line per rollout off a terminal, TensorBoard event
files, the plot's title."""
from __future__ import annotations

import io
import re

from rlrun.config import load
from rlrun.metrics import METRICS_FILE, MetricsLogger, format_line, plot, read_metrics

ROWS = [{"rollout/reward_mean": 0.25, "rollout/response_len_mean": 3.0, "rollout/kept_samples": 128.0,
         "time/rollout_s": 0.5, "time/train_s": 0.25, "time/step_s": 1.0},
        {"rollout/reward_mean": 0.5, "rollout/response_len_mean": 2.0, "rollout/kept_samples": 96.0,
         "time/rollout_s": 1.5, "time/train_s": 0.25, "time/step_s": 3.0}]


def _cfg(*extra):
    return load(["logging.wandb.mode=disabled", *extra])


def test_non_tty_output_has_one_line_per_rollout(tmp_path):
    out = io.StringIO()  # StringIO.isatty() is False: what a log file or a pipe gets
    log = MetricsLogger(tmp_path, _cfg(), total=10, start=0, stream=out)
    for step, row in enumerate(ROWS):
        log.log(step, row)
    log.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    # ETA = mean step time so far x rollouts left: (1.0) x 9 = 9 s, then (1.0 + 3.0) / 2 x 8 = 16 s
    assert lines[0] == ("[rlrun] rollout 0 (1/10) reward 0.25 len 3 kept 128 | rollout 0.50s train 0.25s | "
                        "step 1.00s ETA 9s")
    assert lines[1].startswith("[rlrun] rollout 1 (2/10) reward 0.5 len 2 kept 96 | rollout 1.50s train 0.25s")
    assert lines[1].endswith("step 3.00s ETA 16s")
    assert len(read_metrics(tmp_path / METRICS_FILE)) == 2


def test_progress_false_prints_nothing(tmp_path):
    out = io.StringIO()
    log = MetricsLogger(tmp_path, _cfg("logging.progress=false"), total=3, stream=out)
    log.log(0, ROWS[0])
    log.close()
    assert out.getvalue() == ""


def test_eta_formats_minutes_and_hours():
    row = {"step": 0, "time/step_s": 1.0}
    assert format_line(row, 2, 125.0).endswith("ETA 2m05s")
    assert format_line(row, 2, 3 * 3600 + 60).endswith("ETA 3h01m")


def test_tensorboard_event_files_hold_the_reward_series(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLogger(tmp_path, _cfg("logging.tensorboard=true", "logging.progress=false"), total=2)
    for step, row in enumerate(ROWS):
        log.log(step, row)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert "rollout/reward_mean" in acc.Tags()["scalars"]
    events = acc.Scalars("rollout/reward_mean")
    # 0.25 and 0.5 are exact in float32, the type TensorBoard stores scalars in
    assert [(e.step, e.value) for e in events] == [(0, 0.25), (1, 0.5)]


def test_tensorboard_off_writes_no_event_files(tmp_path):
    log = MetricsLogger(tmp_path, _cfg("logging.progress=false"), total=1)
    log.log(0, ROWS[0])
    log.close()
    assert not (tmp_path / "tensorboard").exists()


def test_plot_title_names_the_run(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from rlrun.config.rundir import write_yaml

    run_dir = tmp_path / "20260101-000000"
    run_dir.mkdir()
    write_yaml(run_dir / "config.yaml", {"run": {"name": "my-run"}})
    log = MetricsLogger(run_dir, _cfg("logging.progress=false"), total=2)
    for step, row in enumerate(ROWS):
        log.log(step, row)
    log.close()
    import matplotlib.pyplot as plt

    seen = []
    orig = plt.Figure.savefig

    def spy(fig, *a, **k):
        seen.append(fig._suptitle.get_text())
        return orig(fig, *a, **k)

    plt.Figure.savefig = spy
    try:
        out = plot(run_dir)
    finally:
        plt.Figure.savefig = orig
    assert out.is_file() and seen == ["my-run (20260101-000000)"]
    assert re.match(rb"\x89PNG", out.read_bytes()[:4])


def test_a_terminal_gets_the_progress_bar_not_lines(tmp_path):
    from rlrun.metrics import LogLines, ProgressBar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    log = MetricsLogger(tmp_path, _cfg(), total=2, stream=out)
    assert [type(s) for s in log._sinks] == [ProgressBar]
    log.log(0, ROWS[0])
    log.close()
    assert out.getvalue() == ""  # rich draws the bar on its own console, not one line per rollout
    log = MetricsLogger(tmp_path, _cfg(), total=2, stream=io.StringIO())
    assert [type(s) for s in log._sinks] == [LogLines]
    log.close()
