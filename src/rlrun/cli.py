"""rlrun's command line. Hydra's compose API does the composing; argv is parsed here because
@hydra.main does not do sub-commands: one argparse parser per command, built from COMMAND_SPECS
(`rlrun CMD --help`: its options, examples and exit codes), the run commands keep Hydra's override
style (key=value, +key=value, ~key, -m for sweeps). `rlrun export slime` / `rlrun import slime` hand
their argv to rlrun.interop.slime, which has its own parsers.

Exit codes: 0 ok, 1 diff found differences / run failed, 2 invalid config or usage (a message, no
traceback: argparse's errors, a refused Ray request and unwritable outputs included)."""
from __future__ import annotations

import argparse
import gc
import json
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

from rlrun.config.errors import ConfigError, UsageError  # UsageError: the commands below the CLI raise it too

CLUSTER_EXPORTS = ("slurm", "kuberay")
# commands whose positional arguments are paths, each run by `module:function(args)`
PATH_COMMANDS = {"show": "rlrun.report:show_main", "compare": "rlrun.report:compare_main",
                 "replay": "rlrun.replay:replay_main"}
EXIT_CODES = "exit codes: 0 ok, 1 diff found differences / the run or job failed, 2 invalid config or usage"


@dataclass(frozen=True)
class Opt:
    """One option of a command: its flags, the Args field it fills, a metavar when it takes a value."""
    flags: tuple[str, ...]
    dest: str
    help: str
    metavar: Optional[str] = None   # None: a flag (store_true)
    choices: Optional[tuple[str, ...]] = None


OVERRIDES = "Hydra overrides key=value, +key=value, ~key (e.g. model=qwen3-4b optim.lr=1e-6)"
CONFIG_DIR = Opt(("--config-dir", "-cd"), "config_dir", "an extra config dir (e.g. DIR/experiment/mine.yaml)", "DIR")
MULTIRUN = Opt(("-m", "--multirun"), "multirun", "sweep: comma lists expand to a grid (a=1,2 b=x,y)")
CFG = Opt(("--cfg", "-c"), "cfg", "print the composed config and exit (null = derived)", "job", ("job", "all"))
RESOLVE = Opt(("--resolve",), "resolve", "with --cfg: the values the run will use, derived ones filled")
JSON = Opt(("--json",), "json", "machine-readable output on stdout")
ADDRESS = Opt(("--address",), "address", "the Ray dashboard (Jobs API) address, default $RAY_ADDRESS", "ADDR")
FOLLOW = Opt(("--follow",), "follow", "stream the job's logs until it ends (exit 0 if it succeeded, else 1)")
CONFIG_OPTS = (CONFIG_DIR, MULTIRUN, CFG, RESOLVE)
AUTH_NOTE = ("Ray token auth: the token is read from $RAY_AUTH_TOKEN, the file $RAY_AUTH_TOKEN_PATH or "
             "~/.ray/auth_token (docs/cluster.md)")
JOB_ID = "one job id (rlrun jobs lists them)"


@dataclass(frozen=True)
class Command:
    summary: str
    args: str                   # the positional arguments, as the usage line shows them
    nargs: tuple[int, Optional[int]] = (0, 0)   # how many non-override positionals (min, max; None: any)
    opts: tuple[Opt, ...] = ()
    examples: tuple[str, ...] = ()
    notes: str = ""
    want: str = ""              # what the positionals are, in a usage error (default: args)


COMMAND_SPECS: dict[str, Command] = {
    "run": Command("validate, plan, prepare the run dir and run (the default command: a tiny CPU job)",
                   "[overrides ...]", opts=CONFIG_OPTS,
                   examples=("rlrun", "rlrun model=qwen3-4b algo=grpo hardware=mi300x", "rlrun -m optim.lr=1e-6,3e-6",
                             "rlrun run.resume=auto")),
    "plan": Command("the plan only (batch math, placement, memory, predicted time and cost); imports neither torch "
                    "nor ray", "[overrides ...]",
                    opts=(*CONFIG_OPTS, JSON, Opt(("--out",), "out", "also write the plan as JSON here (with --calibrate: "
                                                  "the calibration file to write)", "FILE"),
                          Opt(("--calibrate",), "calibrate", "refit the cost model to the RUN_DIRs given as arguments; "
                              "writes conf/calibration.fitted.yaml ($RLRUN_CALIBRATION, or --out), which the plan merges "
                              "over conf/calibration.yaml"),
                          Opt(("--hardware",), "hardware", "with --calibrate: the hardware profile the runs ran on when "
                              "their configs name another one (e.g. an h100 recipe run on an H200)", "NAME")),
                    examples=("rlrun plan experiment=qwen3-4b-grpo-mi300x", "rlrun plan --json --out plan.json",
                              "rlrun plan --calibrate outputs/steps-a/<stamp> outputs/steps-b/<stamp>"),
                    want="no positional argument (run dirs only with --calibrate)"),
    "validate": Command("every rule; all problems at once, each with its key and a fix", "[overrides ...]",
                        opts=(*CONFIG_OPTS, JSON, Opt(("--check-paths",), "check_paths",
                                                      "also the preflight on this machine (paths, data, HF config, disk)")),
                        examples=("rlrun validate model=qwen3-8b hardware=h100 --check-paths",)),
    "diff": Command("what differs between two configs (run dirs, YAML files or quoted override lists)", "A B",
                    (2, 2), (CONFIG_DIR, Opt(("--format",), "format", "output format", "FMT", ("text", "json", "md"))),
                    ("rlrun diff outputs/a/2026... outputs/b/2026...", 'rlrun diff "" "optim.lr=1e-6"'),
                    "exit 0 identical, 1 different, 2 usage"),
    "show": Command("summary table + RUN_DIR/report.html (a sweep dir: its points compared)", "RUN_DIR", (1, 1),
                    examples=("rlrun show outputs/tiny-grpo-cpu/<timestamp>",)),
    "compare": Command("curves of several runs overlaid, labelled by their config differences", "RUN ...", (1, None),
                       (Opt(("--out",), "out", "the HTML report (default: compare.html in the deepest folder holding all the runs)", "FILE"),),
                       ("rlrun compare RUN_A RUN_B --out cmp.html", "rlrun compare outputs/multirun/<timestamp>")),
    "replay": Command("train from a run's rollout records, no engines (needs logging.rollout_records=all)",
                      "RUN_DIR [overrides ...]", (1, 1),
                      (CONFIG_DIR, Opt(("--rollouts",), "rollouts", "only these recorded rollouts (A:B)", "A:B")),
                      ("rlrun replay RUN_DIR --rollouts 0:20 optim.lr=1e-2",)),
    "submit": Command("validate, check the plan against the live Ray cluster, submit through Ray's Jobs API",
                      "[overrides ...]", opts=(CONFIG_DIR, MULTIRUN, ADDRESS, FOLLOW,
                                               Opt(("--working-dir",), "working_dir",
                                                   "the dir uploaded as the job's working dir (default: .)", "DIR")),
                      examples=("rlrun submit experiment=mine --config-dir conf --address http://head:8265 --follow",),
                      notes=AUTH_NOTE),
    "jobs": Command("the jobs of a Ray cluster (submission id, status, entrypoint)", "", opts=(ADDRESS,),
                    examples=("rlrun jobs --address http://head:8265",), notes=AUTH_NOTE),
    "logs": Command("a job's logs", "JOB", (1, 1), (ADDRESS, FOLLOW),
                    ("rlrun logs rlrun-mine-20261124-221500 --follow",), AUTH_NOTE, JOB_ID),
    "stop": Command("stop a job (SIGTERM: the run tears down) and wait for its end", "JOB", (1, 1), (ADDRESS,),
                    ("rlrun stop rlrun-mine-20261124-221500",), AUTH_NOTE, JOB_ID),
    "export": Command("a launcher for the resolved config: slurm (sbatch script), kuberay (RayJob), slime "
                      "(slime's launch script; `rlrun export slime --help`)", "slurm|kuberay|slime [overrides ...]",
                      (1, 1), (CONFIG_DIR, MULTIRUN, Opt(("--out",), "out", "write it here (default: stdout)", "FILE")),
                      ("rlrun export slurm hardware=h100 > job.sbatch",
                       "rlrun export kuberay hardware=h100 cluster.kuberay.image=IMG cluster.kuberay.pvc=PVC",
                       "rlrun export slime model=qwen3-4b")),
    "import": Command("a slime run script as an rlrun experiment (`rlrun import slime --help`)", "slime SCRIPT.sh ...",
                      (1, None), examples=("rlrun import slime run-qwen3-4B.sh --out conf/experiment/mine.yaml",)),
}
COMMANDS = tuple(COMMAND_SPECS)


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  rlrun {name:{width}}  {c.summary}" for name, c in COMMAND_SPECS.items()]
    return ("usage: rlrun [COMMAND] [options] [overrides ...]   (no COMMAND: run)\n\ncommands:\n" + "\n".join(lines)
            + "\n\n  rlrun COMMAND --help   its options, examples and exit codes\n  rlrun --version\n\n"
            + EXIT_CODES + " (no traceback).")


USAGE = _usage()


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
    calibrate: bool = False
    hardware: Optional[str] = None     # plan --calibrate: the profile the runs ran on


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's exit(2) with usage: a UsageError the CLI prints (main() returns 2)
        raise UsageError(f"{message} (rlrun {self.prog.split()[-1]} --help lists the options)")


def command_parser(name: str) -> argparse.ArgumentParser:
    c = COMMAND_SPECS[name]
    epilog = "".join([f"{c.notes}\n\n" if c.notes else "", "examples:\n", *(f"  {e}\n" for e in c.examples),
                      f"\n{EXIT_CODES}" if not c.notes.startswith("exit") else ""])
    p = _Parser(prog=f"rlrun {name}", usage=f"rlrun {name} [options] {c.args}".rstrip(), description=c.summary,
                epilog=epilog, add_help=False, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-h", "--help", action="store_true", help="this help")
    for o in c.opts:
        if o.metavar is None:
            p.add_argument(*o.flags, dest=o.dest, action="store_true", help=o.help)
        else:  # a value from a fixed set: the help lists it (argparse hides choices behind the metavar)
            p.add_argument(*o.flags, dest=o.dest, metavar=o.metavar, choices=o.choices,
                           help=o.help + (f" (one of: {', '.join(o.choices)})" if o.choices else ""))
    # a command without positionals still collects stray words (a usage error names them), unlisted in its help
    p.add_argument("args", nargs="*", metavar=c.args.split()[0].strip("[") if c.args else "ARG",
                   help=c.args + (f"; overrides: {OVERRIDES}" if "overrides" in c.args else "") if c.args
                   else argparse.SUPPRESS)
    return p


def parse(argv: Sequence[str]) -> Args:
    """argv -> Args: the command (default run), its options (argparse, one parser per command: `rlrun CMD
    --help`), the positional arguments split into overrides (key=value, ~key) and the rest."""
    argv = list(argv)
    a = Args()
    if argv[:1] in (["-h"], ["--help"]):
        a.help = True
        return a
    if argv[:1] == ["--version"]:
        a.command = "version"
        return a
    if argv and argv[0] in COMMANDS:
        a.command = argv.pop(0)
    elif argv and not argv[0].startswith("-") and "=" not in argv[0] and not argv[0].startswith(("~", "+")):
        raise UsageError(f"unknown command {argv[0]!r}: one of {', '.join(COMMANDS)} (overrides look like key=value)")
    ns = command_parser(a.command).parse_intermixed_args(argv)
    for key, val in vars(ns).items():
        if key != "args" and val is not None:
            setattr(a, key, val)
    for tok in ns.args:
        a.args.append(tok)
        (a.overrides if "=" in tok or tok.startswith("~") else a.positional).append(tok)
    return a


def _check_positional(a: Args) -> None:
    lo, hi = COMMAND_SPECS[a.command].nargs
    if a.command == "diff":  # A and B may themselves be override lists: diff counts every argument
        return
    n = len(a.positional)
    if n < lo or (hi is not None and n > hi):
        want = COMMAND_SPECS[a.command].want or COMMAND_SPECS[a.command].args or "no positional argument"
        extra = " (overrides look like key=value)" if hi is not None and n > hi else ""
        raise UsageError(f"rlrun {a.command} takes {want}, got {a.positional or 'none'}{extra}")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


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
    from rlrun.launch.preflight import preflight

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
    from rlrun.config.cost import advise

    plan.cost["advice"] = advise(cfg, plan.weight_sync)
    doc = json.dumps(plan.to_dict(), indent=2)
    if a.out:
        _write(a.out, doc + "\n")
    if a.json:
        print(doc)
    else:
        from rlrun.config.render import print_plan

        print_plan(plan)
    return 0


def cmd_calibrate(a: Args) -> int:
    """plan --calibrate RUN_DIR...: the cost model refitted to those runs, written where the plan reads it."""
    from pathlib import Path

    from rlrun.config.calibrate import calibrate, write_overlay
    from rlrun.config.cost import calibration_path

    if not a.positional or a.overrides:
        raise UsageError("rlrun plan --calibrate takes run dirs (each with config.yaml, plan.json, metrics.jsonl), "
                         f"no overrides; got {a.args or 'none'}")
    for d in a.positional:
        if not (Path(d) / "config.yaml").is_file():
            raise UsageError(f"{d}: not a run dir (no config.yaml)")
    try:
        table, report = calibrate([Path(d) for d in a.positional], hardware=a.hardware)
    except ValueError as e:
        raise UsageError(str(e), False) from None
    path = Path(a.out) if a.out else calibration_path()
    try:
        write_overlay(table, path)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    if a.json:
        print(json.dumps({"calibration": str(path), "rows": report}, indent=2))
        return 0
    print(f"{'run':<48} {'phase':<12} {'measured s':>11} {'before s':>9} {'after s':>9}")
    for r in report:
        print(f"{r['run'][-48:]:<48} {r['phase']:<12} {r['measured_s']:>11.3f} {r['before_s']:>9.3f} {r['after_s']:>9.3f}")
    hws = sorted({r["hardware"] for r in report})
    print(f"wrote the fitted constants of {', '.join(hws)} to {path}")
    return 0


def cmd_run(a: Args) -> int:
    from rlrun.config.render import cost_line, summary_lines
    from rlrun.config.rundir import prepare_run_dir

    cfg, plan = _load(a)
    _runnable(cfg, plan, cfg.cluster.address is None)  # a remote cluster's paths: on its head node (runner)
    print("\n".join([*summary_lines(plan), cost_line(plan)]))
    run_dir = prepare_run_dir(cfg, plan, a.overrides)
    print(f"run dir: {run_dir}")
    _print_resume_changes(cfg, run_dir)
    if cfg.run.dry_run:
        return 0
    if cfg.cluster.address is not None:  # before Ray is imported: it reads its auth mode then
        from rlrun.launch.auth import join_in_token_mode

        join_in_token_mode(cfg.cluster.address)
    from rlrun import runner  # lazy: torch and ray load only when a job really runs
    from rlrun.guard.invariants import InvariantError
    from rlrun.guard.watchdog import StallError
    from rlrun.launch.cluster import ResourceError
    from rlrun.reward import RewardError

    try:
        result = runner.run(cfg, plan, run_dir)
    except BaseException as exc:  # the run dir keeps a record of why it ended (rlrun show reads it)
        _record_failure(run_dir, exc)
        # a run invariant, the watchdog, a reward that failed on every sample or a cluster too small stopped
        # it: the cause, no traceback (also when the async loop's producer thread raised it)
        stop = next((e for e in _causes(exc) if isinstance(e, (InvariantError, StallError, RewardError,
                                                                ResourceError))), None)
        if stop is None:
            raise
        print(f"rlrun: the run stopped: {stop}", file=sys.stderr)
        return 3
    if isinstance(result, dict) and result:
        print("final: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in result.items() if isinstance(v, (int, float, str))))
    return 0


def _causes(exc: BaseException | None):
    """exc and the exceptions it was raised from."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _record_failure(run_dir, exc: BaseException) -> None:
    import time
    import traceback

    from rlrun.report import ERROR_FILE

    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return
    head = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    try:
        (run_dir / ERROR_FILE).write_text(f"run failed at {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: "
                                          f"{head}\n\n" + "".join(traceback.format_exception(exc)))
    except OSError:
        pass


def _on_cluster(a: Args, call):
    """A call to a Ray cluster's Jobs / state API: no address, no answer, a refused token (Ray's token
    auth, rlrun.launch.auth) or an unknown job id is a message with exit 2, not a traceback."""
    from rlrun.launch import auth, jobs

    try:
        with auth.ray_http_errors(jobs.dashboard_address(a.address)):
            return call()
    except (jobs.SubmitError, auth.ApiError, ConnectionError) as e:
        raise UsageError(str(e), False) from None


def cmd_submit(a: Args) -> int:
    from rlrun.launch import jobs

    cfg, plan = _load(a)  # an invalid config exits 2 here, before the cluster is asked anything
    return _on_cluster(a, lambda: jobs.submit(cfg, plan, a.overrides, address=a.address, config_dir=a.config_dir,
                                              working_dir=a.working_dir, follow=a.follow))


def cmd_job(a: Args) -> int:
    """jobs | logs JOB | stop JOB"""
    from rlrun.launch import jobs

    if a.command != "jobs" and len(a.positional) != 1:
        raise UsageError(f"rlrun {a.command} takes one job id (rlrun jobs lists them)")
    if a.command == "jobs":
        return _on_cluster(a, lambda: jobs.list_jobs(a.address))
    if a.command == "logs":
        return _on_cluster(a, lambda: jobs.logs(a.address, a.positional[0], a.follow))
    return _on_cluster(a, lambda: jobs.stop(a.address, a.positional[0]))


def cmd_export(a: Args) -> int:
    """export slurm|kuberay: the launch file for the resolved config and its plan."""
    from rlrun.launch.export import EXPORTERS

    what = a.positional.pop(0)
    if what not in EXPORTERS:
        raise UsageError(f"rlrun export {what}: unknown target; one of {', '.join(sorted([*EXPORTERS, 'slime']))}")
    if a.multirun:
        raise UsageError(f"rlrun export {what} writes one config's launcher, not a sweep (-m)")
    cfg, plan = _load(a)
    text = EXPORTERS[what](cfg, plan, a.overrides, a.config_dir)
    if a.out:
        _write(a.out, text)
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


# Commands that read one config and exit (well under a second): run as the program (not main() called by a longer-lived
# process), they run without Python's cyclic garbage collector. Their imports and Hydra's composition allocate ~10^6
# objects, whose collections (~130 during the command, one of them full, and a full one at exit) cost ~40 ms of a
# 0.45 s `rlrun plan` (docs/benchmarks.md) and find next to nothing: what they build lives until exit.
QUICK_COMMANDS = ("plan", "validate", "diff")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quick = argv is None and args[:1] in ([c] for c in QUICK_COMMANDS) and not {"-m", "--multirun"} & set(args)
    if quick:
        gc.disable()
    try:
        return _main(args)
    except BrokenPipeError:  # `rlrun plan | head` is not an error
        sys.stdout = None  # type: ignore[assignment]  # keep the interpreter from flushing into the pipe
        return 0
    finally:
        if quick:
            gc.freeze()  # the interpreter's own collection at exit skips them too


def _main(argv: list[str]) -> int:
    a = None
    try:
        if argv[:1] in (["export"], ["import"]) and argv[1:2] == ["slime"]:
            # interop owns its options (--out, --env, --name, ...) and its --help: hand over before rlrun parses any
            return cmd_interop(argv)
        a = parse(argv)
        if a.help:
            print(USAGE if a.command == "run" and not argv[:1] == ["run"] else command_parser(a.command).format_help())
            return 0
        if a.command == "version":
            from rlrun import __version__

            print(f"rlrun {__version__}")
            return 0
        if a.command == "plan" and a.calibrate:
            return cmd_calibrate(a)
        if a.hardware is not None:  # it names the runs' profile for the fit; a plan's hardware is hardware=NAME
            raise UsageError(f"--hardware is an option of rlrun plan --calibrate only; for a plan on that "
                             f"hardware use the override hardware={a.hardware}")
        _check_positional(a)
        if a.cfg:
            return cmd_print_cfg(a)
        if a.multirun and a.command in ("submit", "jobs", "logs", "stop"):
            raise UsageError(f"rlrun {a.command} takes one config, not a sweep (-m): submit each point")
        if a.multirun and a.command != "export":
            from rlrun.sweep import sweep_main

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
        if a.command == "import":
            raise UsageError(f"rlrun import {a.positional[0]}: unknown source; rlrun imports slime scripts "
                             "(rlrun import slime SCRIPT.sh)")
        return {"run": cmd_run, "plan": cmd_plan, "validate": cmd_validate, "submit": cmd_submit,
                "export": cmd_export}[a.command](a)
    except ConfigError as e:
        return _fail(e, a.json if a is not None else False)
    except UsageError as e:
        cmd = a.command if a is not None else (argv[0] if argv and argv[0] in COMMANDS else None)
        hint = f"rlrun {cmd} --help" if cmd else "rlrun --help"
        usage_hint = e.args[1] if len(e.args) > 1 else True
        msg = e.args[0] if str(e.args[0]).startswith("rlrun ") else f"rlrun: {e.args[0]}"
        print(msg + (f"\n(usage: {hint})" if usage_hint and hint not in e.args[0] else ""),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
