"""rlrun's command line. Hydra's compose API does the composing; argv is parsed here because
@hydra.main does not do sub-commands:

    rlrun [run] [overrides]        validate, plan, prepare the run dir, run (the default: tiny CPU job)
    rlrun plan [overrides] [--json] [--out FILE]
    rlrun validate [overrides] [--check-paths]   (--check-paths: also the preflight on this machine)
    rlrun diff A B [--format text|json|md]
    rlrun show RUN_DIR             summary table + RUN_DIR/report.html (a sweep dir: its points compared)
    rlrun compare RUN ... [--out FILE]   curves of several runs overlaid, labelled by config differences
    rlrun replay RUN_DIR [--rollouts A:B] [overrides]   train from the run's rollout records, no engines
    rlrun -m a=1,2 b=x,y           sweep (also `rlrun plan -m ...`)
    rlrun export|import ...        slime interop
    rlrun export slurm|kuberay [overrides] [--out FILE]   an sbatch script / a KubeRay RayJob for the plan
    rlrun submit [overrides] --address http://HEAD:8265 [--follow] [--working-dir DIR]   a job on a Ray cluster
    rlrun jobs | logs JOB [--follow] | stop JOB   [--address ADDR, default $RAY_ADDRESS]
    --cfg job [--resolve]          print the composed config (null = derived; --resolve: the values the
                                   run will use, derived ones filled, after validation) and exit
    --version
    --config-dir DIR               an extra config dir (e.g. DIR/experiment/mine.yaml)

Exit codes: 0 ok, 1 diff found differences / run failed, 2 invalid config or usage."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

from rlrun.config.errors import ConfigError

COMMANDS = ("run", "plan", "validate", "diff", "export", "import", "show", "compare", "replay",
            "submit", "jobs", "logs", "stop")
CLUSTER_EXPORTS = ("slurm", "kuberay")
# commands whose positional arguments are paths, each run by `module:function(args)`
PATH_COMMANDS = {"show": "rlrun.report:show_main", "compare": "rlrun.report:compare_main",
                 "replay": "rlrun.replay:replay_main"}
USAGE = __doc__.split("\n\n", 1)[1]


@dataclass
class Args:
    command: str = "run"
    overrides: list[str] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)   # every non-option token, in order (diff's A and B)
    json: bool = False
    out: Optional[str] = None
    cfg: Optional[str] = None
    multirun: bool = False
    config_dir: Optional[str] = None
    format: str = "text"
    rollouts: Optional[str] = None
    help: bool = False
    address: Optional[str] = None      # submit/jobs/logs/stop: the Ray dashboard (Jobs API) address
    working_dir: Optional[str] = None  # submit: the dir uploaded as the job's working dir
    follow: bool = False
    resolve: bool = False
    warnings: list = field(default_factory=list)   # filled by _load (rlrun.config.warn)
    check_paths: bool = False


class UsageError(Exception):
    pass


def parse(argv: Sequence[str]) -> Args:
    argv = list(argv)
    a = Args()
    if argv and argv[0] in COMMANDS:
        a.command = argv.pop(0)
    valued = {"--out": "out", "--cfg": "cfg", "-c": "cfg", "--config-dir": "config_dir", "-cd": "config_dir",
              "--format": "format", "--rollouts": "rollouts", "--address": "address", "--working-dir": "working_dir"}
    while argv:
        tok = argv.pop(0)
        name, eq, val = tok.partition("=")
        if tok in ("-h", "--help"):
            a.help = True
        elif tok == "--resolve":
            a.resolve = True  # Hydra's flag for --cfg: the values the run will use (derived ones filled)
        elif tok == "--version":
            a.command = "version"
        elif tok == "--json":
            a.json = True
        elif tok == "--follow":
            a.follow = True
        elif tok == "--check-paths":
            a.check_paths = True
        elif tok in ("-m", "--multirun"):
            a.multirun = True
        elif name in valued and name.startswith("-"):
            if not eq:
                if not argv:
                    raise UsageError(f"{name} needs a value")
                val = argv.pop(0)
            setattr(a, valued[name], val)
        elif tok.startswith("-"):
            raise UsageError(f"unknown option {tok!r}")
        elif "=" in tok or tok.startswith("~"):
            a.overrides.append(tok)
            a.args.append(tok)
        else:
            a.positional.append(tok)
            a.args.append(tok)
    return a


def _fail(err: ConfigError, as_json: bool) -> int:
    if as_json:
        print(json.dumps(err.to_dict(), indent=2))
    else:
        print(err.render(), file=sys.stderr)
    return 2


def _load(a: Args):
    from rlrun.config import load_with_choices
    from rlrun.config.plan import make_plan

    cfg, composed = load_with_choices(a.overrides, a.config_dir)
    _warn(cfg, a)
    return cfg, make_plan(cfg, composed.choices)


def _warn(cfg, a: Args) -> list:
    """Print the config's warnings (rlrun.config.warn) to stderr; `validate --json` puts them in its
    output instead (plan --json keeps stdout for the plan, so they go to stderr there too)."""
    from rlrun.config import warn

    a.warnings = warn.check(cfg, a.overrides)
    if a.warnings and not (a.json and a.command == "validate"):
        print(warn.render(a.warnings), file=sys.stderr)
    return a.warnings


def cmd_print_cfg(a: Args) -> int:
    import yaml

    from rlrun.config.compose import compose

    if a.cfg not in ("job", "all"):
        raise UsageError(f"--cfg {a.cfg}: rlrun prints the job config only (use --cfg job)")
    if a.resolve:  # validated: every derived (null) value filled with what the run will use
        from rlrun.config import load

        tree = load(a.overrides, a.config_dir).to_dict()
    else:  # as composed: null marks a value rlrun derives
        tree = compose(a.overrides, a.config_dir).raw
    print(yaml.safe_dump(tree, sort_keys=False), end="")
    return 0


def _runnable(cfg, plan, check_paths: bool) -> None:
    """What this runner cannot run (rlrun.config.capability) and, with check_paths, the preflight of paths,
    data and disk on this machine: ConfigError with every problem."""
    from rlrun.config import capability
    from rlrun.config.preflight import preflight

    problems = capability.problems(cfg) + (preflight(cfg, plan) if check_paths else [])
    if problems:
        raise ConfigError(problems)


def cmd_validate(a: Args) -> int:
    cfg, plan = _load(a)
    _runnable(cfg, plan, a.check_paths)
    print("valid" if not a.json else json.dumps({"valid": True, "warnings": [w.to_dict() for w in a.warnings]}))
    return 0


def cmd_plan(a: Args) -> int:
    cfg, plan = _load(a)
    from rlrun.config import capability

    for p in capability.problems(cfg):  # a plan of a job rlrun cannot run itself (slime can): a note
        print(f"note: {p.path}: {p.message}", file=sys.stderr)
    doc = json.dumps(plan.to_dict(), indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(doc + "\n")
    if a.json:
        print(doc)
    else:
        from rlrun.config.render import print_plan

        print_plan(plan)
    return 0


def cmd_run(a: Args) -> int:
    from rlrun.config.render import summary_lines
    from rlrun.config.rundir import prepare_run_dir

    cfg, plan = _load(a)
    _runnable(cfg, plan, cfg.cluster.address is None)  # a remote cluster's paths: on its head node (runner)
    print("\n".join(summary_lines(plan)))
    run_dir = prepare_run_dir(cfg, plan, a.overrides)
    print(f"run dir: {run_dir}")
    _print_resume_changes(cfg, run_dir)
    if cfg.run.dry_run:
        return 0
    from rlrun import runner  # lazy: torch and ray load only when a job really runs
    from rlrun.guard.invariants import InvariantError
    from rlrun.guard.watchdog import StallError

    try:
        result = runner.run(cfg, plan, run_dir)
    except (InvariantError, StallError) as e:  # a run invariant or the watchdog stopped it: the cause, no traceback
        print(f"rlrun: the run stopped: {e}", file=sys.stderr)
        return 3
    if isinstance(result, dict) and result:
        print("final: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in result.items() if isinstance(v, (int, float, str))))
    return 0


def cmd_submit(a: Args) -> int:
    from rlrun.launch import jobs

    cfg, plan = _load(a)  # an invalid config exits 2 here, before the cluster is asked anything
    try:
        return jobs.submit(cfg, plan, a.overrides, address=a.address, config_dir=a.config_dir,
                           working_dir=a.working_dir, follow=a.follow)
    except (jobs.SubmitError, ConnectionError) as e:
        raise UsageError(str(e)) from e


def cmd_job(a: Args) -> int:
    """jobs | logs JOB | stop JOB"""
    from rlrun.launch import jobs

    if a.command != "jobs" and len(a.positional) != 1:
        raise UsageError(f"rlrun {a.command} takes one job id (rlrun jobs lists them)")
    try:
        if a.command == "jobs":
            return jobs.list_jobs(a.address)
        return jobs.logs(a.address, a.positional[0], a.follow) if a.command == "logs" else jobs.stop(a.address, a.positional[0])
    except (jobs.SubmitError, ConnectionError) as e:  # no address, or no Jobs API answering there
        raise UsageError(str(e)) from e


def cmd_export(a: Args) -> int:
    """export slurm|kuberay: the launch file for the resolved config and its plan."""
    from rlrun.launch.export import EXPORTERS

    what = a.positional.pop(0)
    if a.multirun:
        raise UsageError(f"rlrun export {what} writes one config's launcher, not a sweep (-m)")
    if a.positional:
        raise UsageError(f"unexpected argument(s) {a.positional}: overrides look like key=value")
    cfg, plan = _load(a)
    text = EXPORTERS[what](cfg, plan, a.overrides, a.config_dir)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        print(f"wrote {a.out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def _print_resume_changes(cfg, run_dir) -> None:
    from rlrun.stopmsg import resume_changes

    changed = resume_changes(cfg, run_dir)
    if changed:
        print(f"resuming with {len(changed)} changed setting(s) (was -> now):\n  " + "\n  ".join(changed))


def cmd_interop(argv: Sequence[str]) -> int:
    from rlrun.interop import slime

    return int(slime.cli_main(list(argv)))  # argv keeps its verb: ["export"|"import", "slime", ...]


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `rlrun plan | head` is not an error
        sys.stdout = None  # type: ignore[assignment]  # keep the interpreter from flushing into the pipe
        return 0


def _main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["export"] and argv[1:2] and argv[1] in CLUSTER_EXPORTS:
            return cmd_export(parse(argv))
        if argv and argv[0] in ("export", "import"):
            # interop owns its options (--out, --env, --name, ...): hand over before rlrun parses any
            return cmd_interop(argv)
        a = parse(argv)
        if a.help:
            print(USAGE)
            return 0
        if a.command == "version":
            from rlrun import __version__

            print(f"rlrun {__version__}")
            return 0
        if a.cfg:
            return cmd_print_cfg(a)
        if a.multirun and a.command in ("submit", "jobs", "logs", "stop"):
            raise UsageError(f"rlrun {a.command} takes one config, not a sweep (-m): submit each point")
        if a.multirun:
            from rlrun.config.sweep import sweep_main

            return sweep_main(a)
        if a.command == "diff":
            from rlrun.config.diff import diff_main

            return diff_main(a)
        if a.command in ("jobs", "logs", "stop"):
            return cmd_job(a)
        if a.command in PATH_COMMANDS:
            import importlib

            module, fn = PATH_COMMANDS[a.command].split(":")
            return getattr(importlib.import_module(module), fn)(a)
        if a.positional:
            raise UsageError(f"unexpected argument(s) {a.positional}: overrides look like key=value")
        return {"run": cmd_run, "plan": cmd_plan, "validate": cmd_validate, "submit": cmd_submit}[a.command](a)
    except ConfigError as e:
        return _fail(e, a.json if "a" in locals() else False)
    except UsageError as e:
        print(f"rlrun: {e}\n\n{USAGE}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
