"""The invalid-config catalogue in slime-script form (tests/unit/invalid_configs/slime/*.sh): each script is the
seed recipe (base/seed-args.sh + base/launch.sh) with one defect, or a valid control. Through the real CLI:
`rlrun import slime X.sh --out conf/experiment/X.yaml`, then `rlrun validate experiment=X`.

A script's header says what must happen (`# expect: ...`):
  import FLAG       the import refuses the script (exit 2) naming FLAG, and writes nothing
  slime KEY         slime/Megatron would stop on the script where rlrun's config cannot say so (a flag slime needs
                    is absent, a KL loss without --ref-load, ...: rlrun.interop.slime_checks): the import refuses it
                    (exit 2, nothing written, --allow-unknown or not), naming KEY and the flag behind it
  validate KEY      the import writes the experiment; validate exits 2 and every problem names KEY (the key of
                    the flag the user set: no follow-on problem on a key the import derived)
  valid             both exit 0
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlrun.cli import main
from rlrun.config import load

CATALOGUE = Path(__file__).resolve().parent / "invalid_configs" / "slime"
SCRIPTS = sorted(CATALOGUE.glob("*.sh"))


def expectation(script: Path) -> tuple[str, str | None]:
    m = re.search(r"^# expect: (import|slime|validate|valid)\b ?(\S+)?", script.read_text(), re.M)
    assert m, f"{script.name}: no `# expect:` line"
    return m.group(1), m.group(2)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def import_and_validate(script: Path, conf: Path, capsys):
    target = conf / "experiment" / f"{script.stem}.yaml"
    imported = run_cli(["import", "slime", str(script), "--out", str(target)], capsys)
    if not target.exists():
        return imported, None, target
    validated = run_cli(["validate", "--json", "--config-dir", str(conf), f"experiment={script.stem}"], capsys)
    return imported, validated, target


def test_catalogue_has_both_kinds():
    kinds = [expectation(s)[0] for s in SCRIPTS]
    assert kinds.count("import") >= 2 and kinds.count("validate") >= 10 and kinds.count("valid") >= 5
    assert kinds.count("slime") >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_slime_script_catalogue(script, tmp_path, capsys):
    kind, name = expectation(script)
    (irc, _, ierr), validated, target = import_and_validate(script, tmp_path / "conf", capsys)
    if kind == "import":
        assert irc == 2 and not target.exists(), ierr
        assert f"{name} " in ierr and "--allow-unknown" in ierr
        assert any(why in ierr for why in ("did you mean", "no rlrun setting for it", "slime feature rlrun lacks"))
        return
    if kind == "slime":
        assert irc == 2 and not target.exists(), ierr
        named = re.findall(r"^    (\S+) \((.+?)\): .*$", ierr.split("slime would not run this script")[1], re.M)
        assert named and {key for key, _ in named} == {name} and all(f.startswith("--") for _, f in named), ierr
        assert "    fix: " in ierr and "nothing written: slime would not run" in ierr
        again = run_cli(["import", "slime", str(script), "--out", str(target), "--allow-unknown"], capsys)
        assert again[0] == 2 and not target.exists()
        return
    assert validated is not None, ierr
    vrc, vout, verr = validated
    if kind == "valid":
        assert (irc, vrc) == (0, 0), ierr + vout + verr
        return
    assert irc == 1 and vrc == 2, ierr + vout
    problems = json.loads(vout)["problems"]
    assert {p["path"] for p in problems} == {name}, problems
    assert all(p["fix"] for p in problems)
    # the import's own report names the slime flag (the script's `ray start` line, its entry file) beside the key
    assert re.search(re.escape(name) + r" \((--|`ray start|`train)", ierr) or name.startswith("model."), ierr


# ---- what the valid controls import to (slime's and Megatron's behaviour, not rlrun's defaults) ---------
def imported_yaml(stem: str, tmp_path: Path, capsys) -> tuple[dict, str]:
    (irc, _, ierr), validated, target = import_and_validate(CATALOGUE / f"{stem}.sh", tmp_path / "conf", capsys)
    assert irc == 0 and validated[0] == 0, ierr
    return yaml.safe_load(target.read_text()), ierr


def test_sixteen_nodes_size_the_cluster(tmp_path, capsys):
    doc, _ = imported_yaml("valid_16_nodes", tmp_path, capsys)
    assert (doc["cluster"]["num_nodes"], doc["train"]["num_nodes"]) == (16, 16)


def test_disaggregated_cluster_holds_trainer_and_rollout_gpus(tmp_path, capsys):
    doc, _ = imported_yaml("valid_disaggregated_two_nodes", tmp_path, capsys)
    # 8 trainer GPUs + 8 rollout GPUs on nodes of 8 (--num-gpus-per-node's default)
    assert (doc["cluster"]["num_nodes"], doc["train"]["colocate"], doc["rollout"]["num_gpus"]) == (2, False, 8)


def test_an_engine_of_16_gpus_on_nodes_of_8_spans_two_whole_nodes(tmp_path, capsys):
    """slime's --rollout-num-gpus-per-engine 16 with --num-gpus-per-node 8: one engine on 2 nodes (nnodes 2)."""
    from rlrun.config.plan import make_plan

    doc, _ = imported_yaml("valid_engine_over_two_nodes", tmp_path, capsys)
    cfg = load(["experiment=valid_engine_over_two_nodes"], config_dir=tmp_path / "conf")
    assert (doc["rollout"]["gpus_per_engine"], cfg.hardware.gpus_per_node) == (16, 8)
    assert doc["cluster"]["num_nodes"] == 3  # 8 trainer GPUs on node 0, the engine on nodes 1 and 2
    plan = make_plan(cfg)
    assert (plan.num_engines, plan.nodes_per_engine, plan.num_nodes) == (1, 2, 3)
    assert sorted({(s.node, s.gpu) for s in plan.engine_slots(0)}) == [(n, g) for n in (1, 2) for g in range(8)]


def test_sequence_parallel_at_tp1_is_dropped_as_megatron_does(tmp_path, capsys):
    _, err = imported_yaml("valid_tp1_sequence_parallel", tmp_path, capsys)
    p = load(["experiment=valid_tp1_sequence_parallel"], config_dir=tmp_path / "conf").parallelism
    assert (p.tp, p.sequence_parallel) == (1, False)
    assert "Megatron turns it off" in err


def test_num_epoch_beside_num_rollout_is_a_warning(tmp_path, capsys):
    _, err = imported_yaml("valid_num_epoch_with_num_rollout", tmp_path, capsys)
    assert "warning: slime ignores --num-epoch when --num-rollout is set" in err


def test_absent_global_batch_size_is_megatrons_micro_batch_times_dp(tmp_path, capsys):
    doc, err = imported_yaml("valid_no_global_batch_size", tmp_path, capsys)
    # Megatron: global_batch_size = micro_batch_size 1 * DP (8 GPUs / TP 2) = 4; 32 * 8 / 4 = 64 steps derived
    assert (doc["train"]["global_batch_size"], doc["train"]["num_steps_per_rollout"]) == (4, None)
    assert "train.global_batch_size = 4  (--global-batch-size absent)" in err


def test_kv_groups_without_gqa_import_as_multi_head_attention(tmp_path, capsys):
    target = tmp_path / "conf" / "experiment" / "x.yaml"
    rc, _, err = run_cli(["import", "slime", str(CATALOGUE / "kv_groups_without_gqa.sh"), "--out", str(target)], capsys)
    assert rc == 1 and yaml.safe_load(target.read_text())["model"]["num_query_groups"] == 32
    assert "without --group-query-attention: Megatron builds multi-head attention (32 KV groups)" in err


def test_allow_unknown_writes_the_experiment_with_the_flag_listed(tmp_path, capsys):
    target = tmp_path / "conf" / "experiment" / "x.yaml"
    rc, _, _ = run_cli(["import", "slime", str(CATALOGUE / "flag_typo.sh"), "--out", str(target),
                        "--allow-unknown"], capsys)
    assert rc == 0 and "#   --rollout-temprature 0.6  [flag_typo.sh:" in target.read_text()


def test_console_entry_point_refuses_an_invalid_import(tmp_path):
    """The installed command line, not the in-process function: exit codes and the named key."""
    conf = tmp_path / "conf"
    cli = [sys.executable, "-m", "rlrun.cli"]
    script = CATALOGUE / "gbs_above_rollout.sh"
    imp = subprocess.run([*cli, "import", "slime", str(script), "--out", str(conf / "experiment" / "g.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert imp.returncode == 1, imp.stderr
    val = subprocess.run([*cli, "validate", "--config-dir", str(conf), "experiment=g"], capture_output=True,
                         text=True, timeout=120)
    assert val.returncode == 2 and "train.global_batch_size" in val.stderr, val.stderr


def test_a_ray_head_is_the_cluster_only_when_nothing_joins_it(tmp_path):
    """rlrun.interop.slime_import.ray_head: the head's GPUs when the script joins no worker to it."""
    from rlrun.interop.bash_script import Script, read_script
    from rlrun.interop.slime_import import ray_head

    script = tmp_path / "run.sh"
    script.write_text("ray start --head --num-gpus=4\nray job submit -- python3 train.py --num-layers 2\n")
    head = [("ray", ["start", "--head", "--num-gpus=4"], "run.sh:1")]
    assert ray_head(Script(path=script, commands=head)) == (4, "run.sh:1")
    assert read_script(script).commands == head  # the static reader records it too
    worker = ("ssh", ["w1", "ray start --address=10.0.0.1:6379 --num-gpus 4"], "run.sh:2")
    assert ray_head(Script(path=script, commands=[*head, worker])) is None
    # counted from a machine the sandbox lacks (`nvidia-smi -L | wc -l` = 0): unknown, not a cluster of 0 GPUs
    assert ray_head(Script(path=script, commands=[("ray", ["start", "--head", "--num-gpus", "0"], "run.sh:1")])) is None
    # a worker loop over a host file the sandbox does not have runs no ssh, but its text joins workers
    script.write_text("ray start --head --num-gpus 4\nfor w in $(cat hosts); do ssh $w \"ray start --address=h:6379\"; "
                      "done\n")
    assert ray_head(Script(path=script, commands=head)) is None


def test_num_epoch_without_num_rollout_counts_the_prompt_file(tmp_path, capsys):
    doc, err = imported_yaml("valid_num_epoch_without_num_rollout", tmp_path, capsys)
    # slime: num_rollout = (72 rows // 32 prompts per rollout) x 2 epochs = 4
    assert doc["rollout"]["num_rollout"] == 4
    assert "rollout.num_rollout = 72 rows of" in err and "// 32 x 2 = 4" in err


def test_a_custom_generate_function_owns_the_response_limit_and_the_reward():
    """slime_checks.absent_required: without --rm-type and --rollout-max-response-len slime's own rollout fails;
    a --custom-generate-function-path makes the responses (and may set the reward) itself."""
    from rlrun.interop import slime_checks
    from rlrun.interop.slime_decode import decode, parse_args

    base = ["--hf-checkpoint", "/m", "--prompt-data", "/d.jsonl", "--rollout-batch-size", "8", "--num-rollout", "2"]

    def refused(argv):
        return sorted(p.path for p in slime_checks.run(decode(parse_args(argv))))

    assert refused(base) == ["data.rm_type", "rollout.max_response_len"]
    assert refused([*base, "--custom-generate-function-path", "my_pkg.gen.generate"]) == []
    assert refused([*base, "--rm-type", "math", "--rollout-max-response-len", "512"]) == []
