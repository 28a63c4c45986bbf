"""rlrun.config.capability: a config slime runs but rlrun's runner does not (deepseek-v3's MLA) is refused by
`rlrun validate` and `rlrun run` before Ray starts, while `rlrun plan` and `rlrun export slime` still work."""
from rlrun.cli import main
from rlrun.config import capability, load
from rlrun.config.families import FAMILIES

DEEPSEEK = ["model=deepseek-v3", "hardware=b200"]


def test_validate_and_run_refuse_what_no_backend_trains(capsys):
    assert main(["validate", *DEEPSEEK]) == 2
    assert "model.family" in capsys.readouterr().err
    assert main(["run", *DEEPSEEK, "run.dry_run=true"]) == 2  # before the run dir and before Ray


def test_plan_and_export_still_work_with_a_note(capsys):
    assert main(["plan", *DEEPSEEK]) == 0
    assert "note: model.family" in capsys.readouterr().err
    assert main(["export", "slime", *DEEPSEEK]) == 0
    assert "--q-lora-rank" in capsys.readouterr().out


def test_every_other_family_is_trained_where_it_is_accepted():
    untrained = {name for name, f in FAMILIES.items() if set(f.backends) - set(f.trains)}
    assert untrained == {"deepseek_v3"}
    assert capability.problems(load([])) == []
    assert capability.problems(load(["model=qwen3-4b", "hardware=h100"])) == []
