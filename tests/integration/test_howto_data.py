"""docs/data.md's how-to, run as it is written: the shell block between its howto markers, in a fresh dir,
with this venv's `rlrun` on PATH (a JSONL file and a reward file to a validated run and its report)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "data.md"


def howto_block() -> str:
    text = DOC.read_text()
    block = text.split("<!-- howto:begin -->", 1)[1].split("<!-- howto:end -->", 1)[0]
    return re.search(r"```bash\n(.*?)```", block, re.S).group(1)


def test_the_data_and_reward_howto_runs_as_written(tmp_path):
    script = howto_block()
    assert "data.prompt_data=" in script and "my_reward.py:" in script  # it teaches the keys it names
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=540)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "\nvalid\n" in f"\n{r.stdout}", out[-4000:]
    assert re.search(r"\[rlrun\] done: 3 steps", out), out[-4000:]
    (run_dir,) = (tmp_path / "myproj" / "outputs" / "tiny-grpo-cpu").iterdir()
    assert (run_dir / "report.html").is_file()
    assert f"report: outputs/tiny-grpo-cpu/{run_dir.name}/report.html" in r.stdout  # `rlrun show`, the last step
    assert "Traceback" not in out
