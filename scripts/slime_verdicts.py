"""Run every launch script of a slime checkout through `rlrun import slime`, `rlrun validate` and `rlrun plan`,
and print the verdicts as the markdown table of docs/slime.md ("slime's own scripts").

    python scripts/slime_verdicts.py SLIME_GIT_DIR [--commit SHA] [--json OUT.json]

SLIME_GIT_DIR is a clone of https://github.com/THUDM/slime (a bare one is fine); the scripts are exported at
the commit (default HEAD) into a temporary folder and run from its root, as slime's README runs them
(`bash scripts/run-qwen3-4B.sh`). Nothing of slime is kept. `rlrun validate` and `rlrun plan` run with the checkout's
root and the script's folder on sys.path, as slime's job has them (`python3 train.py` from slime's root, and the
`PYTHONPATH` of the scripts' runtime env names `${SCRIPT_DIR}`), so that the generate and reward functions the
scripts name import; slime's own modules need the `slime-examples` extra (pylatexenc, psutil, httpx).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# what slime's README runs them with: slime at /root/slime (its docker image), and the variables scripts demand
ENV = {"BASE_FOLDER": "/root", "BASE_DIR": "/root", "MASTER_ADDR": "127.0.0.1"}
SCRIPT_GLOBS = ("scripts/run-*.sh", "scripts/low_precision/*.sh", "examples/*/*.sh")


def _cli(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    from rlrun.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd):
        try:
            rc = main(argv)
        except SystemExit as exc:  # a usage error
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def verdict(root: Path, rel: str, conf: Path) -> dict:
    name = re.sub(r"[^a-z0-9_.-]+", "-", Path(rel).stem.lower())
    target = conf / "experiment" / f"{name}.yaml"
    env = [x for k, v in ENV.items() for x in ("--env", f"{k}={v}")]
    rc, _, err = _cli(["import", "slime", rel, "--out", str(target), "--bind", f"/root/slime={root}", *env], root)
    err = re.sub(r"\S*/rlrun-bash-\w+/prelude\.sh: line \d+: ", "", err).replace(f"{root}/", "")
    row = {"script": rel, "import_rc": rc}
    if not target.exists():
        refused = re.search(r"nothing written: \d+ flag\(s\) would be left out.*?: (.*?)\. Fix", err, re.S)
        if refused:
            flags = sorted(set(refused.group(1).split(", ")))
            row.update(verdict="refused", detail=flags, reasons=_reasons(err, flags))
        else:
            row.update(verdict="error", detail=err.strip().splitlines()[-1:] if err.strip() else [])
        return row
    with _job_path(root, rel):
        vrc, vout, verr = _cli(["validate", "--json", "--config-dir", str(conf), f"experiment={name}"], root)
    if vrc != 0:
        try:
            problems = [f"{p['path']}: {p['message']}" for p in json.loads(vout)["problems"]]
        except (ValueError, KeyError):
            problems = (verr or vout).strip().splitlines()[-3:]
        row.update(verdict="invalid", detail=problems)
        return row
    with _job_path(root, rel):
        prc, pout, perr = _cli(["plan", "--config-dir", str(conf), f"experiment={name}"], root)
    row.update(verdict="valid" if prc == 0 else "plan failed",
               detail=[] if prc == 0 else (perr or pout).strip().splitlines()[-2:])
    return row


@contextlib.contextmanager
def _job_path(root: Path, rel: str):
    """sys.path as slime's job has it: its root (train.py's folder) and the script's folder (runtime-env PYTHONPATH)."""
    extra = [str(root), str((root / rel).parent)]
    sys.path[:0] = extra
    try:
        yield
    finally:
        for p in extra:
            sys.path.remove(p)


def _reasons(err: str, flags: list[str]) -> dict[str, str]:
    out = {}
    for flag in flags:
        m = re.search(r"^\s+" + re.escape(flag) + r"(?=\s).*?\] (.*)$", err, re.M)
        out[flag] = m.group(1) if m else ""
        if flag == "(model flags)":  # why bash gave no model flags: the script's own bug, in its words
            out[flag] = "no model flags reach train.py (Megatron would not start): " + "; ".join(
                re.findall(r"note: (\S+: bash ran .*? as a command|bash: .*No such file or directory)", err))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("git_dir")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    git = ["git", "--git-dir", args.git_dir]
    commit = subprocess.run([*git, "rev-parse", args.commit], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="slime-") as tmp:
        root = Path(tmp) / "slime"
        root.mkdir()
        archive = subprocess.run([*git, "archive", commit], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        scripts = sorted({str(p.relative_to(root)) for g in SCRIPT_GLOBS for p in root.glob(g)})
        rows = [verdict(root, rel, Path(tmp) / "conf") for rel in scripts]
    if args.json:
        Path(args.json).write_text(json.dumps({"commit": commit, "rows": rows}, indent=1))
    print(render(commit, rows))
    return 0


def render(commit: str, rows: list[dict]) -> str:
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("valid", "invalid", "refused", "error", "plan failed")}
    lines = [f"slime commit `{commit}`: {len(rows)} launch scripts, run from the checkout's root with "
             f"`--bind /root/slime=.` and `--env {' '.join(f'{k}={v}' for k, v in ENV.items())}`; " +
             ", ".join(f"{n} {v}" for v, n in counts.items() if n), "",
             "| script | verdict | what rlrun lacks / the problem |", "|---|---|---|"]
    for r in rows:
        if r["verdict"] == "refused":
            why = "; ".join(f"`{f}`: {r['reasons'].get(f, '')}" for f in r["detail"])
        else:
            why = "; ".join(r["detail"])
        lines.append(f"| `{r['script']}` | {r['verdict']} | {why.replace('|', '/')} |")
    lines += ["", "What each refusal names, with the number of scripts it stops (a script may name several):", "",
              "| feature rlrun lacks / problem | scripts |", "|---|---|"]
    lines += [f"| {what} | {n} |" for what, n in feature_counts(rows)]
    return "\n".join(lines)


def feature_counts(rows: list[dict]) -> list[tuple[str, int]]:
    """feature (or validate problem's key) -> scripts naming it, most first."""
    counts: dict[str, set[str]] = {}
    for r in rows:
        if r["verdict"] == "refused":
            for flag in r["detail"]:
                why = r["reasons"].get(flag, "")
                what = why.split("slime feature rlrun lacks: ", 1)[1] if "rlrun lacks: " in why else (
                    "no model flags reach train.py (the script's own bug)" if flag == "(model flags)" else f"`{flag}`")
                counts.setdefault(what, set()).add(r["script"])
        elif r["verdict"] != "valid":
            for d in r["detail"]:
                counts.setdefault(d.split(":", 1)[0] + " (validate)", set()).add(r["script"])
    return sorted(((k, len(v)) for k, v in counts.items()), key=lambda kv: (-kv[1], kv[0]))


if __name__ == "__main__":
    sys.exit(main())
