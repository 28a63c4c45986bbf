"""The catalogue of invalid configs (invalid_configs/catalogue.yaml) and its valid controls (valid.yaml):
every invalid entry fails with the expected dotted paths, through rlrun.config.load and through the real
command line (`rlrun validate ...` exits 2 and names each key), every problem says what is wrong and how
to fix it, and every valid control exits 0."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlrun.cli import main
from rlrun.config import ConfigError, load

HERE = Path(__file__).parent / "invalid_configs"
HF = HERE / "hf"  # published config.json files ({HF} in the YAML)


def _read(name: str) -> dict:
    text = (HERE / name).read_text()
    return yaml.safe_load(text.replace("{HF}", str(HF)))


CATALOGUE = _read("catalogue.yaml")
VALID = _read("valid.yaml")


def test_catalogue_is_large_enough():
    assert len(CATALOGUE) >= 70 and len(VALID) >= 15


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_invalid_config_reports_expected_paths(case):
    overrides, expected = CATALOGUE[case]
    with pytest.raises(ConfigError) as err:
        load(overrides)
    problems = err.value.problems
    assert set(expected) <= {p.path for p in problems}, err.value.render()
    for p in problems:
        assert p.message and p.fix, p
    assert len({(p.path, p.message) for p in problems}) == len(problems), "duplicate problems"
    from test_config_fixes import check_offered_fixes

    check_offered_fixes(overrides, problems)  # each value a fix offers clears its key (test_config_fixes.py)


def test_the_fixes_offer_enough_values_to_test():
    """The catalogue's fixes name enough concrete values for the check above to mean something. It runs after
    the per-entry test, which filled OFFERED; run alone, it goes through the catalogue itself."""
    from test_config_fixes import OFFERED, _problems, check_offered_fixes

    if sum(OFFERED.values()) < 100:
        for overrides, _ in CATALOGUE.values():
            check_offered_fixes(overrides, _problems(overrides))
    assert sum(OFFERED.values()) >= 100
    assert set(OFFERED) >= {"parallelism.tp", "parallelism.pp", "parallelism.ep", "model", "algo.kl_coef",
                            "rollout.engine"}


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_cli_validate_exits_2_naming_the_users_keys(case, capsys):
    overrides, expected = CATALOGUE[case]
    assert main(["validate", *overrides]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    for path in expected:
        assert f". {path}: " in out.err, out.err


@pytest.mark.parametrize("case", sorted(VALID))
def test_cli_validate_accepts_the_valid_controls(case, capsys):
    assert main(["validate", *VALID[case]]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out == "valid\n"


def test_the_installed_command_agrees():
    # the console script itself (a fresh process, no in-process state): one invalid, one valid case
    rlrun = [sys.executable, "-c", "import sys; from rlrun.cli import main; sys.exit(main())"]
    env = {**os.environ, "RLRUN_NO_CACHE": "1"}
    bad = subprocess.run(rlrun + ["validate", "experiment=nonexistent"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert bad.returncode == 2 and "experiment: unknown experiment 'nonexistent'" in bad.stderr, bad.stderr
    ok = subprocess.run(rlrun + ["validate", *VALID["tp1_with_sequence_parallel"]], capture_output=True, text=True,
                        env=env, timeout=120)
    assert ok.returncode == 0 and ok.stdout == "valid\n", ok.stderr


def test_an_underivable_batch_identity_is_reported_once():
    # gbs 48 does not divide 16 * 8 = 128 samples: num_steps_per_rollout stays null, and that null must
    # not come back as a second, type-level problem on train.num_steps_per_rollout
    with pytest.raises(ConfigError) as err:
        load(["hardware=h100", "train.global_batch_size=48", "train.num_steps_per_rollout=null"])
    assert [p.path for p in err.value.problems] == ["train.global_batch_size"], err.value.render()


def test_one_root_cause_gives_one_problem():
    # optim.critic_lr is derived from optim.lr: the bad lr is reported once, not again on critic_lr;
    # a section replaced by a scalar does not bring the batch identity or rollout.num_gpus along
    for overrides, paths in ((["optim.lr=abc"], ["optim.lr"]), (["train=3"], ["train"])):
        with pytest.raises(ConfigError) as err:
            load(overrides)
        assert err.value.paths == paths, err.value.render()


def test_messages_point_at_the_right_key_and_a_value_that_works():
    with pytest.raises(ConfigError) as err:
        load(["tp=3"])
    assert err.value.problems[0].fix.startswith("write parallelism.tp")
    # 16 prompts x 8 samples = 128 per rollout; 200 divides neither, so the fix computes both ways out
    with pytest.raises(ConfigError) as err:
        load(["train.global_batch_size=200"])
    fix = err.value.problems[0].fix
    assert "128 (train.num_steps_per_rollout=1) or 64 (train.num_steps_per_rollout=2)" in fix
    assert "rollout.rollout_batch_size to a multiple of 25" in fix  # 25 * 8 = 200 = 1 step of 200
    for rbs, steps in ((25, 1), (50, 2)):  # and what it suggests is valid
        load(["train.global_batch_size=200", f"rollout.rollout_batch_size={rbs}",
              f"train.num_steps_per_rollout={steps}", "train.use_dynamic_batch_size=false"])
