"""`rlrun run` with a reward that fails on every sample of the first rollout: the run stops there (exit 3, no
traceback on the terminal), error.txt in the run dir holds the first error and its sample, and nothing trained.
The function passes the preflight (its one call there gets the label as the response) and fails on every answer
the random-init policy gives: a grader that knows only the reference answer."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rlrun.metrics import METRICS_FILE
from rlrun.report import ERROR_FILE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STRICT = '''
def strict(response, label, metadata=None):
    if response != label:
        raise KeyError(f"no grade for {response!r}")
    return 1.0
'''


def test_a_reward_failing_on_every_sample_stops_the_run_with_its_first_error(tmp_path):
    (tmp_path / "rw.py").write_text(STRICT)
    (tmp_path / "d.jsonl").write_text('{"input": "9999", "label": "9999"}\n' * 4)  # 4 characters: 1 token never fits
    r = subprocess.run([sys.executable, "-m", "rlrun.cli", "run", f"data.prompt_data={tmp_path / 'd.jsonl'}",
                        f"data.rm_type={tmp_path / 'rw.py'}:strict", f"run.output_dir={tmp_path / 'out'}",
                        "rollout.rollout_batch_size=2", "rollout.n_samples_per_prompt=2", "train.global_batch_size=4",
                        "logging.wandb.mode=disabled", "logging.progress=false"],
                       cwd=tmp_path, text=True, capture_output=True, timeout=280)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "failed on every one of the 4 samples of this rollout; the first error: KeyError: \"no grade for" \
        in r.stderr, r.stderr[-3000:]
    (run_dir,) = (tmp_path / "out" / "tiny-grpo-cpu").iterdir()
    error = (run_dir / ERROR_FILE).read_text()
    assert "RewardError" in error and "on the sample: prompt='9999'" in error and "label='9999'" in error, error
    assert not (run_dir / METRICS_FILE).exists() or not (run_dir / METRICS_FILE).read_text().strip()
