"""Every sub-command, as a user mistypes it: exit 2 with a message, never a traceback; and every
sub-command's --help (its options, examples, exit codes)."""
import json
import subprocess
import sys

from rlrun.cli import COMMANDS, main

NOWHERE = "http://127.0.0.1:1"  # nothing listens on port 1: a refused connection, at once

# command -> bad invocations (argv after `rlrun`); every command in rlrun.cli.COMMANDS has some
BAD = {
    "run": [["run", "--bogus"], ["run", "notanoverride"], ["run", "--cfg"], ["run", "--cfg", "bogus"],
            ["run", "nosuch.key=1"]],
    "plan": [["plan", "--out"], ["plan", "--out", "/nonexistent/dir/plan.json"], ["plan", "--format", "md"]],
    "validate": [["validate", "rollout.top_p=2"], ["validate", "--json", "extra"]],
    "diff": [["diff", "a"], ["diff", "--format", "xml", "a=1", "b=2"]],
    "show": [["show"], ["show", "/nonexistent/run"], ["show", "a", "b"]],
    "compare": [["compare"], ["compare", "/nonexistent/run"], ["compare", "--out"]],
    "replay": [["replay"], ["replay", "/nonexistent/run"], ["replay", "/tmp", "--rollouts"]],
    "submit": [["submit", "--address"], ["submit", "--address", NOWHERE], ["submit", "rollout.top_p=2"],
               ["submit", "-m", "optim.lr=1e-6,2e-6", "--address", NOWHERE]],
    "jobs": [["jobs"], ["jobs", "--address", NOWHERE], ["jobs", "extra", "--address", NOWHERE]],
    "logs": [["logs"], ["logs", "nope", "--address", NOWHERE], ["logs", "a", "b"]],
    "stop": [["stop"], ["stop", "nope", "--address", NOWHERE], ["stop", "nope", "--follow"]],
    "export": [["export"], ["export", "bogus"], ["export", "slurm", "--out"], ["export", "slime", "--bogus"],
               ["export", "kuberay", "-m", "optim.lr=1e-6,2e-6"]],
    "import": [["import"], ["import", "bogus"], ["import", "slime"], ["import", "slime", "/nonexistent.sh"]],
}
OTHER_BAD = [["nope"], ["--bogus"], ["-m", "--json"]]


def test_the_walk_covers_every_command():
    assert set(BAD) == set(COMMANDS)


def test_every_usage_error_exits_2_with_a_message_and_no_traceback(tmp_path):
    """All invocations in one interpreter (one import of rlrun, ray only where a command needs it);
    each prints its own marker line so a traceback is attributed to its argv."""
    cases = [argv for argvs in BAD.values() for argv in argvs] + OTHER_BAD
    code = ("import json, sys\nfrom rlrun.cli import main\n"
            f"for argv in {cases!r}:\n"
            "    print('@@@ ' + json.dumps(argv), file=sys.stderr, flush=True)\n"
            "    rc = main(argv)\n"
            "    print('@@@ rc ' + json.dumps([argv, rc]), file=sys.stderr, flush=True)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "RAY_ADDRESS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    blocks = r.stderr.split("@@@ ")[1:]
    rcs = [json.loads(b[3:].splitlines()[0]) for b in blocks if b.startswith("rc ")]
    assert [argv for argv, _ in rcs] == cases, r.stderr[-3000:]   # none raised (the loop went through)
    assert {json.dumps(argv): rc for argv, rc in rcs} == {json.dumps(argv): 2 for argv in cases}
    assert "Traceback" not in r.stderr + r.stdout
    messages = [b for b in blocks if not b.startswith("rc ")]
    for m in messages:  # each says something after its marker line
        assert len(m.strip().splitlines()) >= 2, m


def test_every_command_has_help_with_options_examples_and_exit_codes(capsys):
    for cmd in COMMANDS:
        if cmd in ("import",):
            continue
        assert main([cmd, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: rlrun {cmd} "), out
        assert "examples:" in out and "exit" in out and "-h, --help" in out, out
    assert main(["export", "slurm", "--help"]) == 0  # the help, not an sbatch script
    out = capsys.readouterr().out
    assert "#SBATCH" not in out and "--out FILE" in out
    assert main(["logs", "--help"]) == 0 and "--follow" in capsys.readouterr().out
    assert main(["import", "--help"]) == 0 and "rlrun import slime" in capsys.readouterr().out
    assert main(["import", "slime", "--help"]) == 0 and "--allow-unknown" in capsys.readouterr().out


def test_a_refused_connection_names_the_address(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["logs", "nope", "--address", NOWHERE]) == 2
    assert NOWHERE in capsys.readouterr().err


def test_a_failed_run_keeps_a_record_and_show_of_an_empty_run_says_so(tmp_path, monkeypatch, capsys):
    """The run dir of a run that dies before its first step keeps error.txt; `rlrun show` of a run dir with
    no step exits 1 saying why (it printed an empty table with exit 0)."""
    import pytest

    from rlrun import runner

    assert main(["run", f"run.output_dir={tmp_path}", "run.dry_run=true"]) == 0
    (dry,) = (tmp_path / "tiny-grpo-cpu").iterdir()
    capsys.readouterr()
    assert main(["show", str(dry)]) == 1
    assert "no steps logged: the run is still starting, or stopped before its first step" in capsys.readouterr().err

    def boom(cfg, plan, run_dir):
        raise RuntimeError("engine 0 died")

    monkeypatch.setattr(runner, "run", boom)
    with pytest.raises(RuntimeError):
        main(["run", f"run.output_dir={tmp_path}", "run.name=failing"])
    (failed,) = (tmp_path / "failing").iterdir()
    record = (failed / "error.txt").read_text()
    assert record.startswith("run failed at ") and "RuntimeError: engine 0 died" in record.splitlines()[0]
    assert "Traceback" in record
    capsys.readouterr()
    assert main(["show", str(failed)]) == 1
    err = capsys.readouterr().err
    assert "the run failed before its first step" in err and "RuntimeError: engine 0 died" in err


def test_help_lists_choices_shows_no_bare_positional_and_slimes_commands_have_examples_and_exit_codes(capsys):
    from rlrun.cli import COMMAND_SPECS

    for cmd, spec in COMMAND_SPECS.items():
        assert main([cmd, "--help"]) == 0
        out = capsys.readouterr().out
        if not spec.args:  # jobs: no positional argument to list (it used to show a bare ARG)
            assert "positional arguments" not in out and "ARG" not in out, out
        for opt in spec.opts:
            if opt.choices:  # --format FMT, --cfg job: the values it takes are named
                assert f"(one of: {', '.join(opt.choices)})" in out, (cmd, out)
    assert main(["diff", "--help"]) == 0 and "(one of: text, json, md)" in capsys.readouterr().out
    for verb in ("export", "import"):
        assert main([verb, "slime", "--help"]) == 0
        out = capsys.readouterr().out
        assert f"examples:\n  rlrun {verb} slime " in out and "exit codes: 0 " in out, out
