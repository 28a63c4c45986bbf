"""Launch scripts written for rlrun (tests/unit/slime_forms/run/*.sh) that exercise each bash form slime's scripts
use (nested `source "$(dirname ...)/x.sh"`, `$(( ))`, `$(cd .. && pwd)`, a variable reassigned in an `if`, a
heredoc runtime env, an array never assigned, `python3 -u train.py`, a loop, `pkill`/`ray stop` before the launch)
and each class of verdict: valid (with the values bash gives), refused naming the slime feature rlrun lacks,
refused without model flags. Through the real CLI; the script's header says what must happen:
  # expect: valid                      import exits 0 and `rlrun validate` exits 0
  # check: dotted.path = JSON          a value of the loaded config ({root} is tests/unit/slime_forms)
  # expect: refused FLAG TEXT          import exits 2 naming FLAG with TEXT as its reason, writing nothing
Needs the bash sandbox (rlrun.interop.bash_run); skipped where user namespaces are unavailable."""

import json
import re
import shutil
from pathlib import Path

import pytest

from rlrun.cli import main
from rlrun.config import load
from rlrun.interop.bash_run import sandbox_problem

pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")

FORMS = Path(__file__).resolve().parent / "slime_forms"
SCRIPTS = sorted(p for p in (FORMS / "run").glob("*.sh") if "# expect:" in p.read_text())
SEED = Path(__file__).resolve().parents[1] / "data" / "slime" / "run-qwen3-4B-mi300x.sh"
QWEN3_4B = Path(__file__).resolve().parent / "invalid_configs" / "slime" / "base" / "Qwen3-4B"


def cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def get(cfg, path: str):
    node = cfg
    for key in path.split("."):
        node = node[int(key)] if isinstance(node, list) else (node.get(key) if isinstance(node, dict)
                                                                 else getattr(node, key))
    return node


def test_every_class_is_in_the_catalogue():
    kinds = [re.search(r"^# expect: (\w+)", s.read_text(), re.M).group(1) for s in SCRIPTS]
    assert kinds.count("valid") >= 3 and kinds.count("refused") >= 4


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_form(script, tmp_path, capsys):
    text = script.read_text()
    kind, rest = re.search(r"^# expect: (\w+) ?(.*)$", text, re.M).groups()
    target = tmp_path / "conf" / "experiment" / f"{script.stem}.yaml"
    rc, _, err = cli(["import", "slime", str(script), "--out", str(target)], capsys)
    if kind == "refused":
        flag, why = rest.split(" ", 1) if not rest.startswith("(") else rest.split(") ", 1)
        flag = flag + ")" if rest.startswith("(") else flag
        assert rc == 2 and not target.exists(), err
        assert re.search(r"^\s+" + re.escape(flag) + r"\b.*\] .*" + re.escape(why), err, re.M) or \
            (flag in err.split("nothing written")[1] and why in err), err
        return
    assert rc == 0, err
    vrc, vout, verr = cli(["validate", "--config-dir", str(tmp_path / "conf"), f"experiment={script.stem}"], capsys)
    assert vrc == 0, vout + verr
    cfg = load([f"experiment={script.stem}"], config_dir=tmp_path / "conf").model_dump(mode="json")
    for path, want in re.findall(r"^# check: (\S+) = (.*)$", text, re.M):
        assert get(cfg, path) == json.loads(want.replace("{root}", str(FORMS))), path


def test_missing_continuation_is_explained(tmp_path, capsys):
    _, _, err = cli(["import", "slime", str(FORMS / "run" / "missing_continuation.sh")], capsys)
    # bash gives the line of the command's last word (the `${CKPT_ARGS[@]}` line)
    assert re.search(r"missing_continuation\.sh:10: bash ran `--[a-z-]+ .*` as a command of its own: a `\\` line "
                     r"continuation is missing", err), err


def test_seed_with_real_folders_passes_validate_check_paths(tmp_path, capsys, monkeypatch, gpu_machine):
    """The seed recipe imported with an HF model folder, its torch_dist conversion as --ref-load and the data files:
    the preflight accepts the torch_dist folder (the reference model is built from the HF weights)."""
    import rlrun.launch.preflight as pf

    real = pf.shutil.disk_usage  # 150 saves of a 4B model: a disk this machine need not have (test_preflight)
    monkeypatch.setattr(pf.shutil, "disk_usage", lambda p: real(p)._replace(free=2 ** 50))
    hf = tmp_path / "Qwen3-4B"
    hf.mkdir()
    shutil.copy(QWEN3_4B / "config.json", hf / "config.json")
    (hf / "model.safetensors").write_bytes(b"")
    (hf / "tokenizer.json").write_text("{}")
    shards = tmp_path / "Qwen3-4B_torch_dist" / "iter_0000000"
    shards.mkdir(parents=True)
    (shards / ".metadata").write_bytes(b"")
    (shards / "__0_0.distcp").write_bytes(b"")
    (tmp_path / "Qwen3-4B_torch_dist" / "latest_checkpointed_iteration.txt").write_text("0")
    for rel in ("dapo-math-17k/dapo-math-17k.jsonl", "aime-2024/aime-2024.jsonl"):
        (tmp_path / rel).parent.mkdir()
        (tmp_path / rel).write_text('{"prompt": "1+1?", "label": "2"}\n')
    conf = tmp_path / "conf"
    rc, _, err = cli(["import", "slime", str(SEED), "--env", f"MODEL_DIR={tmp_path}", "--env", f"DATA_DIR={tmp_path}",
                      "--out", str(conf / "experiment" / "seed.yaml")], capsys)
    assert rc == 0, err
    rc, out, verr = cli(["validate", "--check-paths", "--config-dir", str(conf), "experiment=seed",
                         f"run.output_dir={tmp_path / 'out'}"], capsys)
    assert rc == 0, out + verr
    cfg = load(["experiment=seed"], config_dir=conf)
    assert cfg.checkpoint.ref == str(tmp_path / "Qwen3-4B_torch_dist")
