"""rlrun.interop.bash_run: a launch script run by the real bash in the sandbox gives the argv bash gives, and
nothing it does reaches outside the sandbox. Skipped where user namespaces are unavailable (the importer then
reads statically, which test_interop_bash.py covers)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlrun.interop.bash_run import run_script, sandbox_problem
from rlrun.interop.bash_script import ScriptError

pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")

LAUNCH = 'ray job submit --address="http://127.0.0.1:8265" -- python3 train.py ${ARGS[@]}\n'


def write(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/bash\n" + text)
    return p


def argv(script) -> list[str]:
    return [a.text for a in script.launch.args]


def test_pkill_ray_stop_kill_and_rm_outside_touch_nothing(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    # a process of ours that `pkill -9 python` / `kill -9 -1` would kill outside a PID namespace
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        script = write(tmp_path, f"""set -e
pkill -9 python
/usr/bin/pkill -9 -f "import time"
kill -9 {sleeper.pid} || true
kill -9 -1 || true
ray stop --force
rm -rf {victim}
/bin/rm -rf {victim}
echo pwned > {victim}/new.txt
mkdir -p {tmp_path}/made
ARGS=(--num-layers 2)
{LAUNCH}""")
        read = run_script(script)
        time.sleep(0.2)
        assert sleeper.poll() is None  # still running: the sandbox saw only its own processes
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (victim / "keep.txt").read_text() == "x" and not (victim / "new.txt").exists()
    assert not (tmp_path / "made").exists()
    assert argv(read) == ["--num-layers", "2"]
    recorded = read.notes[0]
    assert "pkill" in recorded and "ray" in recorded and "rm" in recorded and "mkdir" in recorded
    assert any("Read-only file system" in n for n in read.notes)  # the absolute /bin/rm and the redirection


def test_no_network_in_the_sandbox(tmp_path):
    script = write(tmp_path, f"""exec 3<>/dev/tcp/127.0.0.1/22 && NET=open || NET=closed
ARGS=(--net "$NET")
{LAUNCH}""")
    assert argv(run_script(script)) == ["--net", "closed"]


def test_bash_forms_come_out_as_bash_gives_them(tmp_path):
    (tmp_path / "a" / "b" / "models").mkdir(parents=True)
    (tmp_path / "a" / "b" / "models" / "m.sh").write_text(
        'source "$(dirname "${BASH_SOURCE[0]}")/inner.sh"\nMODEL_ARGS=(--num-layers $((LAYERS * 2)))\n')
    (tmp_path / "a" / "b" / "models" / "inner.sh").write_text("LAYERS=18\n")
    script = write(tmp_path / "a" / "b", """set -euxo pipefail
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
source "${SCRIPT_DIR}/models/m.sh"
NVLINK=$(nvidia-smi topo -m 2>/dev/null | grep -o 'NV[0-9]' | wc -l)
if [ "$NVLINK" -gt 0 ]; then HAS_NVLINK=1; else HAS_NVLINK=0; fi
MEGATRON=$(pip list | grep megatron-core | awk '{print $NF}')
RUNTIME_ENV_JSON=$(cat <<EOF
{"env_vars": {"NCCL_NVLS_ENABLE": "${HAS_NVLINK}", "ROOT": "${ROOT}"}}
EOF
)
ray job submit --address="http://127.0.0.1:8265" --runtime-env-json="${RUNTIME_ENV_JSON}" \\
   -- python3 -u train.py ${MODEL_ARGS[@]} ${NEVER_SET[@]} --tp $(( 8 / 4 )) --data "${ROOT}/d.jsonl"
""")
    read = run_script(script, cwd=tmp_path)
    assert argv(read) == ["--num-layers", "36", "--tp", "2", "--data", f"{tmp_path}/d.jsonl"]
    assert read.launch.entry == "train.py" and read.launch.address == "http://127.0.0.1:8265"
    assert read.launch.runtime_env_vars == {"NCCL_NVLS_ENABLE": "0", "ROOT": str(tmp_path)}
    assert read.launch.args[0].array == "MODEL_ARGS" and read.launch.args[2].array is None
    assert read.launch.args[0].where.startswith("m.sh:2")
    assert read.sourced == [tmp_path / "a" / "b" / "models" / "m.sh", tmp_path / "a" / "b" / "models" / "inner.sh"]


def test_the_last_train_launch_wins_and_other_pythons_are_not_launches(tmp_path):
    script = write(tmp_path, """python3 tools/convert_hf_to_torch_dist.py --hf x
python3 -c 'print(1)'
python train_async.py --a 1
exec python3 /root/slime/train.py --b 2
""")
    read = run_script(script)
    assert (read.launch.entry, argv(read)) == ("train.py", ["--b", "2"])
    assert "2 train launches ran" in " ".join(read.notes)


def test_a_script_that_exits_before_its_launch_says_why(tmp_path):
    script = write(tmp_path, 'if [ -z "${BASE_DIR:-}" ]; then echo "BASE_DIR is not set"; exit 1; fi\nARGS=()\n' + LAUNCH)
    with pytest.raises(ScriptError, match="bash exited 1: BASE_DIR is not set"):
        run_script(script)
    assert argv(run_script(script, environ={"BASE_DIR": "/data"})) == []


def test_binds_show_a_folder_where_the_script_expects_it(tmp_path):
    (tmp_path / "slime" / "scripts" / "models").mkdir(parents=True)
    (tmp_path / "slime" / "scripts" / "models" / "q.sh").write_text("ARGS=(--hidden-size 64)\n")
    script = write(tmp_path, "source /root/slime-test-bind/scripts/models/q.sh\n" + LAUNCH)
    assert argv(run_script(script, binds={"/root/slime-test-bind": str(tmp_path / "slime")})) == ["--hidden-size", "64"]
    assert not Path("/root/slime-test-bind").exists()


def test_a_script_that_never_ends_is_stopped(tmp_path):
    script = write(tmp_path, "while true; do :; done\n")
    t0 = time.monotonic()
    with pytest.raises(ScriptError, match="still ran after 2 s"):
        run_script(script, timeout=2)
    assert time.monotonic() - t0 < 10  # 2 s limit + the sandbox's start; a generous bound for a shared machine


def test_the_caller_environment_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_FROM_CALLER", "1")
    script = write(tmp_path, 'ARGS=(--x "${SECRET_FROM_CALLER:-unset}" --home "$HOME")\n' + LAUNCH)
    got = argv(run_script(script))
    assert got[:2] == ["--x", "unset"] and got[3] != os.environ.get("HOME")


def test_static_reader_is_the_fallback_and_says_why(tmp_path, monkeypatch):
    from rlrun.interop import bash_run
    from rlrun.interop.slime_import import read_launch

    script = write(tmp_path, "ARGS=(--num-layers 2)\n" + LAUNCH)
    got = read_launch(script, static=True)
    assert argv(got) == ["--num-layers", "2"] and got.notes[0].startswith("read without bash (--static was given)")
    # no unshare on the machine: the probe says so, and the importer reads statically with that reason
    monkeypatch.setattr(bash_run.shutil, "which", lambda name: None if name == "unshare" else "/bin/" + name)
    why = bash_run.sandbox_problem.__wrapped__()
    assert "`unshare` (util-linux) is not installed" in why
    monkeypatch.setattr(bash_run, "sandbox_problem", lambda: why)
    got = read_launch(script)
    assert argv(got) == ["--num-layers", "2"] and why in got.notes[0]
    with pytest.raises(ScriptError, match="cannot run the script in a sandbox"):
        run_script(script)
