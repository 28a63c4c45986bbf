"""Read a slime launch script the way bash reads it: run it with the real bash in a sandbox where every
command that would act on the machine or the network is a shim that records its arguments and does nothing.

The sandbox (`sandbox_problem()` says when it cannot be built; the importer then falls back to the static
reader in bash_script.py and says so):
- Linux namespaces (`unshare`): a new user, mount, PID and network namespace. Every mount is remounted
  read-only except a temporary folder (HOME, TMPDIR and the call log live there), and the script runs in a
  second, nested user namespace, so the read-only flags are locked (the script cannot remount them, even
  as its namespace's root). `pkill -9 python`, `ray stop --force` or `kill -9 -1` see only the sandbox's
  own processes; `rm -rf` of a path outside it fails on a read-only file system; there is no network.
- `env -i` with PATH = a folder of shims only. Text tools whose output scripts use (`cat` for a heredoc,
  `dirname`, `sed`, `awk`, `grep`, `seq`, ...) are the real ones; `python`/`python3`/`ray` are shell
  functions that record the argv, the file:line of the call, the exported environment and every array
  (so that each argument can be traced to the array it came from); everything else (`pkill`, `nvidia-smi`,
  `ssh`, `sleep`, `curl`, `pip`, `git`, `hf`, `rm`, `mkdir`, ...) and any command not found is a no-op that
  records its argv.
- A wall-clock limit (a script waiting in a loop for a cluster that never comes is stopped and reported).

The result is the same `Script` the static reader builds, so the importer does not care which one read it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from rlrun.interop.bash_script import Arg, Launch, Script, ScriptError, _runtime_env_vars

TIMEOUT_S = 30.0
# Read-only text tools a script's command substitutions use: the real binaries (they only print).
PASS_THROUGH = ("cat", "dirname", "basename", "realpath", "readlink", "sed", "awk", "gawk", "mawk", "grep",
                "egrep", "fgrep", "head", "tail", "tr", "cut", "seq", "expr", "wc", "sort", "uniq", "date",
                "printf", "echo", "true", "false", "test", "[", "ls", "bc", "jq", "tac", "paste", "id",
                "whoami", "uname", "xargs", "mktemp", "stat", "sha256sum", "md5sum", "base64", "rev", "column")
# Commands that run the rest of their argv: the rest goes through the sandbox's PATH (shims) again.
WRAPPERS = ("nohup", "sudo", "stdbuf", "nice", "ionice", "time")
# Commands that act on the machine, the network or files: recorded, never run (and any unknown command).
SHIMS = ("python", "python3", "ray", "pkill", "pgrep", "killall", "nvidia-smi", "rocm-smi", "amd-smi", "ssh",
         "scp", "rsync", "sleep", "curl", "wget", "pip", "pip3", "uv", "git", "hf", "huggingface-cli", "rm",
         "mkdir", "cp", "mv", "touch", "chmod", "chown", "ln", "mount", "umount", "docker", "apt", "apt-get",
         "conda", "ip", "ifconfig", "lsof", "ps", "netstat", "ss", "hostname", "nc", "mpirun", "torchrun",
         "srun", "sbatch", "scontrol", "sglang", "nproc", "free", "df", "du", "tar", "unzip", "wait", "systemctl",
         "service", "reboot", "shutdown", "dd", "ulimit", "sysctl", "setsid", "nvcc", "ibstat", "ibv_devinfo")
_INTERNAL_ENV = frozenset({"PATH", "HOME", "TMPDIR", "BASH_ENV", "PWD", "OLDPWD", "SHLVL", "_", "__RLRUN_LOG",
                           "__RLRUN_BIN", "__RLRUN_CALLS"})
_BASH_ARRAYS = re.compile(r"^(BASH_\w+|FUNCNAME|GROUPS|PIPESTATUS|DIRSTACK|COMP_\w+|__rlrun\w*)$")
_MARK = "\x1eRLRUN"
_TRAIN_ENTRY = re.compile(r"(^|/)train(_async)?\.py$")
_PY_OPTS_WITH_VALUE = {"-X", "-W", "-Q"}

_PRELUDE = r"""
__rlrun_dump() {  # $1 kind, $2 file, $3 line, then the argv
  { local -; set +x +e +u; } 2>/dev/null
  local kind="$1" file="$2" line="$3" n a
  shift 3
  {
    printf '%s\0' $'\x1eRLRUN' "$kind" "$file" "$line" "$PWD" "$#" "$@"
    local -a __rlrun_names=($(compgen -e))
    printf '%s\0' "${#__rlrun_names[@]}"
    for n in "${__rlrun_names[@]}"; do printf '%s\0' "$n=${!n}"; done
    __rlrun_names=($(compgen -A arrayvar))
    printf '%s\0' "${#__rlrun_names[@]}"
    for n in "${__rlrun_names[@]}"; do
      local -n __rlrun_arr="$n"
      printf '%s\0' "$n" "${#__rlrun_arr[@]}" "${__rlrun_arr[@]}"
      unset -n __rlrun_arr
    done
  } > "$__RLRUN_CALLS/${EPOCHREALTIME/./}-$BASHPID-$RANDOM"
}
__rlrun_call() { { local -; set +x; } 2>/dev/null; local k="$1"; shift; __rlrun_dump "$k" "${BASH_SOURCE[2]:-?}" "${BASH_LINENO[1]:-0}" "$@"; return 0; }
python() { __rlrun_call python "$@"; }
python3() { __rlrun_call python3 "$@"; }
ray() { __rlrun_call ray "$@"; }
source() { __rlrun_dump source "${BASH_SOURCE[1]:-?}" "${BASH_LINENO[0]:-0}" "$1"; builtin source "$@"; }
# errexit never stops the script: a shim prints nothing where the real machine prints something (`pip list |
# grep megatron-core` under `set -eo pipefail`), and the launch line after it is what is read. nounset and an
# explicit `exit` still stop it, as they would on the machine.
trap 'builtin set +e' DEBUG
command_not_found_handle() { __rlrun_dump unknown "${BASH_SOURCE[1]:-?}" "${BASH_LINENO[0]:-0}" "$@"; return 0; }
"""
_SHIM = """#!{bash}
unset BASH_ENV
printf '%s\\0' $'\\x1eRLRUN' "$(basename "$0")" "?" 0 "$PWD" "$#" "$@" 0 0 > "$__RLRUN_CALLS/${{EPOCHREALTIME/./}}-$$-$RANDOM"
{body}
exit 0
"""
_ENV_SHIM_BODY = """while [ $# -gt 0 ]; do
  case "$1" in -i|-|--ignore-environment) shift;; -u) shift 2;; -*) shift;; *=*) export "$1"; shift;; *) break;; esac
done
[ $# -gt 0 ] && exec "$__RLRUN_BIN/run-in-sandbox" "$@"
"""
# runs a command name through the sandbox: a shim or pass-through in the bin folder, else an unknown (a no-op)
_RUN_IN_SANDBOX = """#!{bash}
unset BASH_ENV
[ -x "$__RLRUN_BIN/$(basename "$1")" ] && exec "$__RLRUN_BIN/$(basename "$1")" "${{@:2}}"
printf '%s\\0' $'\\x1eRLRUN' unknown "?" 0 "$PWD" "$#" "$@" 0 0 > "$__RLRUN_CALLS/${{EPOCHREALTIME/./}}-$$-$RANDOM"
exit 0
"""
# inside the first namespaces: make every mount read-only but the sandbox folder, then run the script in a
# nested user namespace (which locks those read-only flags)
_SETUP = r"""
set -e
sbx="$1"; unshare_bin="$2"; nbinds="$3"; shift 3
mount --bind "$sbx" "$sbx"
for ((i = 0; i < nbinds; i++)); do  # DST SRC: SRC's files seen read-only at DST (a tmpfs over a missing parent)
  dst="$1"; src="$2"; shift 2
  if [ ! -e "$dst" ]; then
    top="$dst"; while [ ! -e "$(dirname "$top")" ]; do top="$(dirname "$top")"; done
    parent="$(dirname "$top")"
    [ "$parent" = / ] && { echo "rlrun-sandbox: cannot bind at $dst" >&2; exit 97; }
    mount -t tmpfs rlrun-bind "$parent"
    mkdir -p "$dst"
  fi
  mount --bind "$src" "$dst"
done
while read -r m; do
  m=$(printf '%b' "$m")
  case "$m" in /proc|/proc/*) continue;; esac
  [ "$m" = "$sbx" ] && continue
  mount -o remount,bind,ro "$m" 2>/dev/null || { echo "rlrun-sandbox: cannot make $m read-only" >&2; exit 97; }
done < <(awk '{print $5}' /proc/self/mountinfo | sort -u)
mount -o remount,bind,rw "$sbx"
exec "$unshare_bin" --user --map-root-user --mount "$@"
"""


@lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """None when the namespace sandbox works here, else why not (the static reader is used instead)."""
    bash, unshare = shutil.which("bash"), shutil.which("unshare")
    if not bash:
        return "bash is not installed"
    if not unshare:
        return "`unshare` (util-linux) is not installed, so the script cannot be isolated"
    with tempfile.TemporaryDirectory(prefix="rlrun-bash-probe-") as tmp:
        try:
            proc = subprocess.run(_sandbox_cmd(unshare, bash, tmp, ["-c", "echo ok > \"$0/probe\"", tmp]),
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the namespace sandbox did not start ({exc})"
        if proc.returncode != 0 or not (Path(tmp) / "probe").is_file():
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            return f"user namespaces are not available to build the sandbox ({why})"
    return None


def _sandbox_cmd(unshare: str, bash: str, sbx: str, bash_args: list[str], env: dict[str, str] | None = None,
                 cwd: str | None = None, binds: dict[str, str] | None = None) -> list[str]:
    inner = [shutil.which("env") or "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in (env or {}).items()]]
    if cwd:
        inner = [bash, "-c", 'cd "$1" && shift && exec "$@"', "cd", cwd, *inner]
    return [unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "--mount-proc",
            "--kill-child", bash, "-c", _SETUP, "setup", sbx, unshare, str(len(binds or {})),
            *[x for dst, src in (binds or {}).items() for x in (dst, src)], *inner, bash, *bash_args]


def _make_bin(root: Path, bash: str) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name in PASS_THROUGH:
        if (real := shutil.which(name)) and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(real)
    scripts = {name: "" for name in SHIMS}
    scripts["tee"] = 'exec "$__RLRUN_BIN/cat"'  # a log file is not written; the text passes on
    scripts["env"] = _ENV_SHIM_BODY
    scripts["timeout"] = 'while [ "${1#-}" != "$1" ]; do shift; done; shift; exec "$__RLRUN_BIN/run-in-sandbox" "$@"'
    for name in WRAPPERS:
        scripts[name] = 'while [ "${1#-}" != "$1" ]; do shift; done; exec "$__RLRUN_BIN/run-in-sandbox" "$@"'
    scripts["bash"] = scripts["sh"] = f'export BASH_ENV="{root}/prelude.sh"; exec {bash} "$@"'
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(_SHIM.format(bash=bash, body=body))
        path.chmod(0o755)
    runner = bin_dir / "run-in-sandbox"
    runner.write_text(_RUN_IN_SANDBOX.format(bash=bash))
    runner.chmod(0o755)
    return bin_dir


def run_script(path: str | Path, environ: dict[str, str] | None = None, cwd: str | Path | None = None,
               timeout: float = TIMEOUT_S, binds: dict[str, str] | None = None) -> Script:
    """Run `path` with bash in the sandbox and return what the static reader would: the launch (argv as bash
    expanded it, each argument traced to the array it came from), the exported env, the arrays and scalars at
    the launch, the files sourced, and notes (commands recorded instead of run, bash's own errors).
    `binds` {DST: SRC} shows the folder SRC at DST inside the sandbox, read-only (slime's examples source
    `/root/slime/scripts/models/*.sh`, where slime's docker image keeps it).
    Raises ScriptError (no such file, no launch, the script failed before it, the time limit)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ScriptError(f"{path}: no such file; pass the slime run script (e.g. scripts/run-qwen3-4B.sh)")
    if why := sandbox_problem():
        raise ScriptError(f"cannot run the script in a sandbox: {why}")
    bash, unshare = shutil.which("bash") or "bash", shutil.which("unshare") or "unshare"
    with tempfile.TemporaryDirectory(prefix="rlrun-bash-") as tmp:
        root = Path(tmp)
        for d in ("home", "tmp"):
            (root / d).mkdir()
        (root / "prelude.sh").write_text(_PRELUDE)
        bin_dir = _make_bin(root, bash)
        calls = root / "calls"
        calls.mkdir()
        env = {**(environ or {}), "PATH": str(bin_dir), "HOME": str(root / "home"), "TMPDIR": str(root / "tmp"),
               "BASH_ENV": str(root / "prelude.sh"), "__RLRUN_CALLS": str(calls), "__RLRUN_BIN": str(bin_dir)}
        binds = {str(Path(d)): str(Path(s).resolve()) for d, s in (binds or {}).items()}
        cmd = _sandbox_cmd(unshare, bash, tmp, [str(path)], env, str(Path(cwd or os.getcwd()).resolve()), binds)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ScriptError(f"{path}: the script still ran after {timeout:.0f} s in the sandbox (a loop waiting "
                              "for something that never comes?); nothing was imported") from None
        if proc.returncode == 97:
            raise ScriptError(f"cannot run the script in a sandbox: {stderr.strip()}")
        # one file per call, named by the time of the call (µs) so that they sort in the order they ran
        records = [r for f in sorted(calls.iterdir()) for r in _parse_log(f.read_bytes())]
    return _script_from(path, records, proc.returncode, stderr, stdout)


def _parse_log(data: bytes) -> list[dict]:
    fields = data.decode("utf-8", "surrogateescape").split("\0")
    out, i = [], 0
    while i < len(fields):
        if fields[i] != _MARK:
            i += 1
            continue
        kind, file, line, pwd, n = fields[i + 1: i + 6]
        i += 6
        argv = fields[i: i + int(n)]
        i += int(n)
        n_env = int(fields[i])
        env = dict(f.split("=", 1) for f in fields[i + 1: i + 1 + n_env] if "=" in f)
        i += 1 + n_env
        n_arrays = int(fields[i])
        i += 1
        arrays = {}
        for _ in range(n_arrays):
            name, count = fields[i], int(fields[i + 1])
            arrays[name] = fields[i + 2: i + 2 + count]
            i += 2 + count
        out.append({"kind": kind, "file": file, "line": int(line), "pwd": pwd, "argv": argv, "env": env,
                    "arrays": {k: v for k, v in arrays.items() if not _BASH_ARRAYS.match(k)}})
    return out


def _entry_index(argv: list[str]) -> int | None:
    """The index of the script in `python3 [-u ...] train.py ARGS` (argv without the interpreter)."""
    j = 0
    while j < len(argv) and argv[j].startswith("-") and argv[j] not in ("-m", "-c"):
        j += 2 if argv[j] in _PY_OPTS_WITH_VALUE else 1
    return j if j < len(argv) and _TRAIN_ENTRY.search(argv[j]) else None


def _launch_of(rec: dict) -> tuple[list[str], str | None, dict[str, str]] | None:
    """(argv after the entry file, with the entry first; ray's --address; its runtime-env vars) or None."""
    argv = rec["argv"]
    if rec["kind"] in ("python", "python3"):
        k = _entry_index(argv)
        return (argv[k:], None, {}) if k is not None else None
    if rec["kind"] != "ray" or argv[:2] != ["job", "submit"] or "--" not in argv:
        return None
    sep = argv.index("--")
    opts: dict[str, str] = {}
    j = 2
    while j < sep:
        key, eq, val = argv[j].partition("=")
        if not eq and j + 1 < sep and not argv[j + 1].startswith("--"):
            val, j = argv[j + 1], j + 1
        opts[key] = val
        j += 1
    inner = argv[sep + 1:]
    if not inner or not re.fullmatch(r"python3?(\.\d+)?", Path(inner[0]).name):
        return None
    k = _entry_index(inner[1:])
    if k is None:
        return None
    env = _runtime_env_vars(opts.get("--runtime-env-json"), rec["file"], rec["line"])
    return inner[1 + k:], opts.get("--address"), env


def _traced(args: list[str], arrays: dict[str, list[str]], file: str, line: int) -> list[Arg]:
    """Each argument with the array it was spliced from (the longest array matching at that position)."""
    candidates = sorted(((n, v) for n, v in arrays.items() if v), key=lambda nv: -len(nv[1]))
    out: list[Arg] = []
    i = 0
    while i < len(args):
        for name, values in candidates:
            if args[i: i + len(values)] == values:
                out.extend(Arg(v, file, line, name) for v in values)
                i += len(values)
                break
        else:
            out.append(Arg(args[i], file, line))
            i += 1
    return out


def _located(args: list[Arg], files: list[Path]) -> list[Arg]:
    """A flag's file:line is the first line of the script (or a file it sourced) that spells it; its values
    share it. Bash does not say where a word of an array came from; this is what a reader looks for."""
    texts = []
    for f in files:
        try:
            texts.append((str(f), f.read_text(errors="replace").splitlines()))
        except OSError:
            continue
    out, where = [], None
    for a in args:
        if a.text.startswith("--"):
            pattern = re.compile(r"(?<![\w-])" + re.escape(a.text.split("=", 1)[0]) + r"(?![\w-])")
            where = next(((f, n) for f, lines in texts for n, ln in enumerate(lines, 1)
                          if pattern.search(ln) and not ln.lstrip().startswith("#")), (a.file, a.line))
        f, n = where or (a.file, a.line)
        out.append(Arg(a.text, f, n, a.array))
    return out


def _script_from(path: Path, records: list[dict], returncode: int, stderr: str, stdout: str = "") -> Script:
    script = Script(path=path)
    launches = [(rec, got) for rec in records if (got := _launch_of(rec))]
    # bash's own messages (an error, a read-only file system), without `set -x` traces
    errors = [ln for ln in stderr.splitlines() if re.search(r": line \d+: |^rlrun-sandbox", ln) and "__rlrun" not in ln]
    if not launches:
        tail = "; ".join(errors[-3:] + [ln for ln in stdout.splitlines() if ln.strip()][-2:])
        status = f" (bash exited {returncode}: {tail})" if returncode or tail else ""
        raise ScriptError(f"{path}: no `ray job submit ... -- python3 train.py ...` or `python3 train.py ...` ran "
                          f"when bash ran the script in the sandbox{status}; rlrun reads the arguments of that line")
    rec, (argv, address, runtime_env) = launches[-1]
    sourced = [Path(r["argv"][0]) for r in records if r["kind"] == "source" and r["argv"]]
    args = _located(_traced(argv[1:], rec["arrays"], rec["file"], rec["line"]), [path, *sourced])
    script.launch = Launch(Path(argv[0]).name, args, address, runtime_env, rec["file"], rec["line"])
    script.variables = {n: [Arg(v, rec["file"], rec["line"], n) for v in vals] for n, vals in rec["arrays"].items()}
    script.exported = [n for n in rec["env"] if n not in _INTERNAL_ENV]
    script.variables.update({n: rec["env"][n] for n in script.exported})
    script.sourced = sourced
    if len(launches) > 1:
        script.notes.append(f"{len(launches)} train launches ran; the last one ({Path(rec['file']).name}:"
                            f"{rec['line']}) is imported")
    recorded: dict[str, int] = {}
    for r in records:
        if r is not rec and r["kind"] != "source":
            name = r["kind"] if r["kind"] != "unknown" else (r["argv"] or ["?"])[0]
            recorded[name] = recorded.get(name, 0) + 1
            args = r["argv"][1:] if r["kind"] == "unknown" else r["argv"]
            script.commands.append((name, args, f"{Path(r['file']).name}:{r['line']}"))
    if recorded:
        shown = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(recorded.items()))
        script.notes.append(f"commands recorded in the sandbox, not run: {shown}")
    for r in records:  # `--flag ...` run as a command: the line before it lacks its `\`
        if r["kind"] == "unknown" and r["argv"] and r["argv"][0].startswith("--"):
            script.notes.append(f"{Path(r['file']).name}:{r['line']}: bash ran `{' '.join(r['argv'][:3])} ...` as a "
                                "command of its own: a `\\` line continuation is missing before it, so these "
                                "flags are not on the launch line (slime would start without them too)")
    script.notes += [f"bash: {ln}" for ln in errors]
    return script
