"""`rlrun export slime [overrides]` and `rlrun import slime SCRIPT.sh [--out conf/experiment/NAME.yaml]`.

The CLI hands over its argv from the verb on: `cli_main(["export", "slime", "model=qwen3-4b", ...])` or
`cli_main(["import", "slime", "run.sh", "--out", "conf/experiment/x.yaml"])`. Exit codes: 0 ok, 1 the
config (exported or imported) does not validate, 2 bad usage, an unreadable script, or a flag the import cannot
carry over (a typo, a flag rlrun has no setting for) without --allow-unknown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence, TextIO


USAGE = """\
rlrun export slime [--config-dir DIR] [overrides ...]
    print the slime launch (env exports, flag arrays, ray job submit line) for the resolved config
rlrun import slime SCRIPT.sh [--out conf/experiment/NAME.yaml] [--name NAME] [--config-dir DIR]
                             [--env NAME=VALUE ...] [--model M] [--algo A] [--hardware H] [--parallelism P] [--data D]
                             [--allow-unknown] [--static] [--bind DST=SRC ...]
    run a slime launch script with bash in a sandbox (every command that acts on the machine or the network is
    a recording no-op; --static reads it without bash) and write an rlrun experiment that reproduces it; a flag it
    cannot carry over (misspelt, or with no rlrun setting) stops it (exit 2) unless --allow-unknown"""


def _export(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    from rlrun.config import ConfigError
    from rlrun.interop.slime_export import export_config

    parser = argparse.ArgumentParser(
        prog="rlrun export slime", add_help=True, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="slime's launch script (bash arrays + `ray job submit ... -- python3 train.py`) for the resolved "
                    "config, on stdout; settings slime has no flag for are listed in its header (docs/slime.md)",
        epilog="examples:\n"
               "  rlrun export slime experiment=qwen3-4b-grpo-mi300x > run-qwen3-4B.sh\n"
               "  rlrun export slime --config-dir conf experiment=mine rollout.num_rollout=200\n\n"
               "exit codes: 0 written, 1 the config does not validate (its problems on stderr, nothing written), "
               "2 usage")
    parser.add_argument("--config-dir", default=None, help="an extra config dir (e.g. one holding experiment/)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for `rlrun plan`")
    args = parser.parse_args(argv)
    try:
        out.write(export_config(args.overrides, args.config_dir))
    except ConfigError as exc:
        err.write(f"rlrun export slime: the config does not validate, nothing exported:\n{exc}\n")
        return 1
    return 0


def _import(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    from rlrun.config import ConfigError
    from rlrun.interop.slime_groups import SCORED_GROUPS
    from rlrun.interop.slime_decode import blocking
    from rlrun.interop.slime_import import experiment_name, import_script

    parser = argparse.ArgumentParser(
        prog="rlrun import slime", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="a slime run script as an rlrun experiment: the config groups that match it best, then the "
                    "settings where the script differs (docs/slime.md)",
        epilog="examples:\n"
               "  rlrun import slime scripts/run-qwen3-4B-amd.sh --out conf/experiment/qwen3-4b.yaml\n"
               "  rlrun import slime run.sh --env BASE_DIR=/data --model qwen3-8b\n\n"
               "exit codes: 0 written (or printed), 2 refused (a flag rlrun cannot carry over, or one slime would "
               "stop on: nothing written) or usage")
    parser.add_argument("script", help="the slime run script (its models/*.sh is read when it sources one)")
    parser.add_argument("--out", default=None, help="write the experiment here (default: print it)")
    parser.add_argument("--name", default=None, help="experiment name (default: --out's or the script's stem)")
    parser.add_argument("--config-dir", default=None, help="an extra config dir to compose with")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable the script expects from its caller (e.g. BASE_DIR=/data); repeatable")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="write the experiment even when flags cannot be carried over (they are listed in it)")
    parser.add_argument("--static", action="store_true",
                        help="read the script without running bash (loops, ifs and $(...) are not evaluated)")
    parser.add_argument("--bind", action="append", default=[], metavar="DST=SRC",
                        help="show folder SRC at DST in the sandbox, read-only (e.g. /root/slime=. for slime's "
                             "examples, which source /root/slime/scripts/models/*.sh); repeatable")
    for group in SCORED_GROUPS:
        parser.add_argument(f"--{group}", default=None, help=f"use this {group} group instead of the best match")
    args = parser.parse_args(argv)
    forced = {g: getattr(args, g) for g in SCORED_GROUPS if getattr(args, g)}
    name = args.name or (experiment_name(args.out) if args.out else None)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        err.write(f"rlrun import slime: --env takes NAME=VALUE, got {bad}\n")
        return 2
    environ = dict(e.split("=", 1) for e in args.env)
    if bad := [b for b in args.bind if "=" not in b]:
        err.write(f"rlrun import slime: --bind takes DST=SRC, got {bad}\n")
        return 2
    binds = dict(b.split("=", 1) for b in args.bind)
    try:
        result = import_script(args.script, name=name, config_dir=args.config_dir, forced=forced, environ=environ,
                               static=args.static, binds=binds)
    # ConfigError: e.g. a --config-dir that does not exist, a forced group that is unknown;
    # ValueError: ScriptError, BashSyntaxError, no group option for the machine
    except (ConfigError, ValueError) as exc:
        err.write(f"rlrun import slime: {exc}\n")
        return 2
    refused = [] if args.allow_unknown else blocking(result.unknown)
    if refused or result.fails:  # --allow-unknown does not change what slime would stop on (result.fails)
        err.write(result.report(written=False) + "\n")
    if refused:
        hint = "see the did-you-mean above" if any("did you mean" in why for _, why in refused) else \
            "as each line above says"
        err.write(f"rlrun import slime: nothing written: {len(refused)} flag(s) would be left out, so the experiment "
                  f"would not run what the script runs: {', '.join(o.flag for o, _ in refused)}. Fix the script "
                  f"({hint}) or pass --allow-unknown to import without them\n")
    if result.fails:
        err.write(f"rlrun import slime: nothing written: slime would not run this script ({len(result.fails)} "
                  f"problem(s) above: {', '.join(p.path for p in result.fails)}). Fix the script as each fix says\n")
    if refused or result.fails:
        return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(result.yaml_text)
        err.write(f"wrote {args.out} (use it as `rlrun plan experiment={result.name}`)\n")
    else:
        out.write(result.yaml_text)
    err.write(result.report() + "\n")
    return 1 if result.problems else 0


def _with_verb(argv: list[str]) -> list[str]:
    """Accept argv without the verb too (`["slime", ...]`, as a dispatcher that strips it passes it):
    export takes only overrides (key=value) and options, import takes a script path first."""
    if argv[:1] != ["slime"]:
        return argv
    positional = [a for a in argv[1:] if not a.startswith("-") and "=" not in a and not a.startswith("~")]
    return ["import" if positional and positional[0].endswith(".sh") else "export", *argv]


def cli_main(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    argv = _with_verb(list(argv))
    if len(argv) < 2 or argv[0] not in ("export", "import") or argv[1] != "slime":
        err.write(f"usage:\n{USAGE}\n")
        return 2
    try:
        return (_export if argv[0] == "export" else _import)(argv[2:], out, err)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0) if isinstance(exc.code, int) else 2


if __name__ == "__main__":  # `python -m rlrun.interop.slime import slime run.sh --env BASE_DIR=/data`
    sys.exit(cli_main(sys.argv[1:]))
