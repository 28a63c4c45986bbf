"""The rlrun command line, run as a user runs it (subprocess) where exit codes and imports matter."""
import json
import os
import subprocess
import sys

from rlrun.cli import main, parse

RLRUN = [sys.executable, "-m", "rlrun.cli"]


def run(*args, **kw):
    return subprocess.run([*RLRUN, *args], capture_output=True, text=True, timeout=120, **kw)


def test_plan_seed_shows_the_layout():
    r = run("plan", "model=qwen3-4b", "algo=grpo", "hardware=mi300x")
    assert r.returncode == 0, r.stderr
    assert "world 8 = TP 2 x PP 1 x CP 1 x DP 4" in r.stdout
    assert "32 prompts x 8 samples = 256 = 256 x 1" in r.stdout and "colocated" in r.stdout


def test_plan_json_is_one_object_and_imports_neither_torch_nor_ray():
    code = ("import sys, json; from rlrun.cli import main; rc = main(['plan', '--json', "
            "'experiment=qwen3-4b-grpo-mi300x']); "
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, 'ray': 'ray' in sys.modules}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    status = json.loads(out[-1])
    assert status == {"rc": 0, "torch": False, "ray": False}
    plan = json.loads("\n".join(out[:-1]))
    for key in ("world_size", "tp", "pp", "cp", "dp", "ep", "colocate", "samples_per_rollout", "steps_per_rollout",
                "global_batch_size", "placement", "params_total", "params_active", "memory_gib", "fits"):
        assert key in plan
    assert (plan["world_size"], plan["tp"], plan["dp"]) == (8, 2, 4)
    assert plan["placement"][0] == {"node": 0, "gpu": 0, "role": "trainer", "rank": 0}


def test_a_repeated_plan_and_validate_import_only_pydantic_and_rich(tmp_path):
    """What keeps `rlrun plan` under 0.5 s cold (bench/plan_cold_start.py, docs/benchmarks.md): with its overrides
    composed before (the composition cache), a fresh process running plan and validate imports no third-party
    package but pydantic and rich, and of rlrun's reward package only its spec (no graders, no pool). A new import (Hydra, PyYAML, numpy,
    math-verify, torch, ray) on this path fails here, before it shows in the timing."""
    code = ("import sys, io, contextlib; from rlrun.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['plan']) + main(['validate'])\n"
            "third = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
            "import json; print(json.dumps([rc, sorted(m for m in third if not m.startswith('_')), "
            "sorted(m for m in sys.modules if m.startswith('rlrun.reward'))]))")
    env = {**os.environ, "RLRUN_CACHE_DIR": str(tmp_path)}
    first, again = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                   env=env) for _ in range(2))
    assert "hydra" in first.stdout  # the first one composed with Hydra (and filled the cache)
    assert json.loads(again.stdout) == [0, ["annotated_types", "pydantic", "pydantic_core", "rich", "rlrun",
                                            "typing_extensions", "typing_inspection"],
                                        ["rlrun.reward", "rlrun.reward.spec"]], again.stdout + again.stderr


def test_one_config_commands_run_as_the_program_without_the_garbage_collector():
    """rlrun.cli.QUICK_COMMANDS run as the program (argv from sys.argv) turn Python's cyclic collector off and freeze
    what they built at the end (docs/benchmarks.md: ~40 ms of `rlrun plan`); a sweep (-m) and main() called with an
    argv by a longer-lived process (tests, a notebook) keep it."""
    code = ("import gc, sys, io, contextlib; from rlrun.cli import main\n"
            "def run(argv, given):\n"
            "    sys.argv = ['rlrun', *argv]\n"
            "    with contextlib.redirect_stdout(io.StringIO()): rc = main(argv if given else None)\n"
            "    on, frozen = gc.isenabled(), gc.get_freeze_count()\n"
            "    gc.enable(); gc.unfreeze()\n"
            "    return [rc, on, frozen > 0]\n"
            "print([run(['plan', '--json'], True), run(['validate', '-m', 'optim.lr=1e-6,2e-6'], False), "
            "run(['plan', '--json'], False)])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "[[0, True, False], [0, True, False], [0, False, True]]", r.stdout + r.stderr


def test_invalid_config_exits_2_with_every_problem_and_no_traceback():
    r = run("validate", "rollout.temperature=0", "train.global_batch_size=48", "+rollout.temprature=1")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert 'did you mean "temperature"' in r.stderr
    r = run("validate", "rollout.temperature=0", "train.global_batch_size=48")
    assert r.returncode == 2 and "2 problems" in r.stderr
    assert "rollout.temperature" in r.stderr and "train.global_batch_size" in r.stderr


def test_plan_json_on_invalid_config_prints_problems_as_json(capsys):
    assert main(["plan", "--json", "rollout.top_p=2"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["problems"][0]["path"] == "rollout.top_p"


def test_cfg_job_and_help(capsys):
    assert main(["--cfg", "job", "model=qwen3-8b", "hardware=h100"]) == 0
    out = capsys.readouterr().out
    assert "name: qwen3-8b" in out and "hidden_size: 4096" in out
    assert main(["--help"]) == 0
    assert "rlrun plan" in capsys.readouterr().out


def test_plan_out_writes_json(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--out", str(out), "rollout.rollout_batch_size=8", "rollout.n_samples_per_prompt=8"]) == 0
    assert json.loads(out.read_text())["global_batch_size"] == 64


def test_dry_run_prepares_run_dir_without_the_runner(tmp_path, capsys):
    assert main(["run", f"run.output_dir={tmp_path}", "run.dry_run=true"]) == 0
    (run_dir,) = (tmp_path / "tiny-grpo-cpu").iterdir()
    assert (run_dir / "plan.json").exists()


def test_usage_errors_exit_2(capsys):
    assert main(["plan", "--bogus"]) == 2
    assert main(["plan", "notanoverride"]) == 2


def test_parse_keeps_overrides_and_flags():
    a = parse(["plan", "-m", "optim.lr=1e-6,3e-6", "--json", "--config-dir", "/x", "~eval.datasets"])
    assert (a.command, a.multirun, a.json, a.config_dir) == ("plan", True, True, "/x")
    assert a.overrides == ["optim.lr=1e-6,3e-6", "~eval.datasets"]
