"""rlrun diff on override lists, run dirs and YAML files; exit codes like diff(1)."""
import json

import yaml

from rlrun.cli import main
from rlrun.config import load
from rlrun.config.diff import split_overrides
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir


def test_split_overrides_keeps_bracketed_values():
    assert split_overrides("model=qwen3-4b,optim.lr=1e-6") == ["model=qwen3-4b", "optim.lr=1e-6"]
    assert split_overrides("rollout.stop=[a,b] optim.lr=1e-6") == ["rollout.stop=[a,b]", "optim.lr=1e-6"]
    assert split_overrides("data.name='a,b',~eval.datasets") == ["data.name='a,b'", "~eval.datasets"]


def test_identical_exits_0(capsys):
    assert main(["diff", "optim.lr=0.002", "optim.lr=2e-3"]) == 0  # two spellings, one value
    assert capsys.readouterr().out.startswith("identical")


def test_changes_and_plan_differences_as_json(capsys):
    a = "rollout.rollout_batch_size=8,optim.lr=1e-3"
    b = "rollout.rollout_batch_size=8,optim.lr=3e-3,rollout.n_samples_per_prompt=4"
    assert main(["diff", a, b, "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["identical"] is False
    assert d["changed"]["optim.lr"] == {"a": 0.001, "b": 0.003}
    assert d["changed"]["train.global_batch_size"] == {"a": 64, "b": 32}   # derived values differ too
    assert d["plan"]["samples_per_rollout"] == {"a": 64, "b": 32}
    assert d["added"] == {} and d["removed"] == {}


def test_run_dirs_and_yaml_files(tmp_path, capsys):
    dirs = []
    for ov in (["optim.lr=1e-3", "rollout.num_rollout=40"], ["optim.lr=2e-3", "rollout.num_rollout=20"]):
        ov = ov + [f"run.output_dir={tmp_path}"]
        cfg = load(ov)
        dirs.append(prepare_run_dir(cfg, make_plan(cfg), ov))
    assert main(["diff", str(dirs[0]), str(dirs[1])]) == 1
    out = capsys.readouterr().out
    assert "optim.lr: 0.001 -> 0.002" in out and "total_steps: 40 -> 20" in out
    # A run dir's config.yaml and a YAML list of overrides are accepted as well.
    (tmp_path / "ov.yaml").write_text(yaml.safe_dump(["optim.lr=2e-3", "rollout.num_rollout=20",
                                                      f"run.output_dir={tmp_path}"]))
    assert main(["diff", str(dirs[1] / "config.yaml"), str(tmp_path / "ov.yaml")]) == 0


def test_markdown_and_bad_inputs(capsys):
    assert main(["diff", "default", "model=qwen3-0.6b,hardware=h100", "--format", "md"]) == 1
    md = capsys.readouterr().out
    assert "### groups" in md and "| `model` | `tiny` | `qwen3-0.6b` |" in md
    assert main(["diff", "default", "rollout.temperature=0"]) == 2
    assert main(["diff", "/no/such/dir"]) == 2


def test_run_dir_written_before_a_field_existed_is_compared_at_todays_default(tmp_path, capsys):
    # An older rlrun wrote no rollout.weight_sync and no train.max_tokens_per_gpu: the diff fills
    # them with today's defaults for the run's groups and says so, instead of refusing the run dir.
    cfg = load([f"run.output_dir={tmp_path}", "optim.lr=2e-3"])
    run = prepare_run_dir(cfg, make_plan(cfg), ["optim.lr=2e-3"])
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["rollout"]["weight_sync"], saved["train"]["max_tokens_per_gpu"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert main(["diff", str(run), f"optim.lr=2e-3,run.output_dir={tmp_path}", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["identical"] is True
    assert len(d["notes"]) == 2
    assert any("rollout.weight_sync is not in its config.yaml" in n and '"auto"' in n for n in d["notes"])
    assert any("train.max_tokens_per_gpu is not in its config.yaml" in n for n in d["notes"])
    assert main(["diff", str(run), f"optim.lr=1e-3,run.output_dir={tmp_path}"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("note: ") and "optim.lr: 0.002 -> 0.001" in out


def test_a_run_name_folder_resolves_to_its_newest_run_and_an_empty_folder_says_what_to_pass(tmp_path, capsys):
    """`rlrun diff outputs/rec` where outputs/rec is a run name's folder ({run.output_dir}/{run.name}): its
    newest run dir (timestamps sort in time order), named in a note; a folder with no run dir says what to pass."""
    runs = []
    for lr in ("1e-3", "2e-3"):  # two runs of one name; the second is the newer
        ov = [f"optim.lr={lr}", f"run.output_dir={tmp_path}", "run.name=rec"]
        cfg = load(ov)
        runs.append(prepare_run_dir(cfg, make_plan(cfg), ov))
    assert runs[0].parent == runs[1].parent == tmp_path / "rec" and runs[0].name < runs[1].name
    assert main(["diff", str(tmp_path / "rec"), str(runs[0])]) == 1
    out = capsys.readouterr().out
    assert "optim.lr: 0.002 -> 0.001" in out  # the folder stood for the newer run (lr 2e-3)
    assert f"holds 2 run(s) of one run name: compared its newest, {runs[1]}" in out
    assert main(["diff", str(tmp_path / "rec"), str(runs[1])]) == 0
    (tmp_path / "empty").mkdir()
    assert main(["diff", str(tmp_path / "empty"), "default"]) == 2
    err = capsys.readouterr().err
    assert "is a folder with no run dir in it" in err and "a run dir holds config.yaml" in err
