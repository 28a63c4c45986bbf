"""The parts' seams (rlrun.parts.seams) are checked by mypy: the real parts, replay's stand-ins and the loop
tests' doubles satisfy them (tests/unit/seam_conformance.py), and a stand-in that drifts is an error."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MYPY = str(Path(sys.executable).with_name("mypy"))
SEAMS = ["src/rlrun/parts/seams.py", "src/rlrun/parts/__init__.py"]


def _mypy(*files: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MYPYPATH=str(ROOT / "tests" / "unit"))
    return subprocess.run([MYPY, "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache), *SEAMS,
                           *files], cwd=ROOT, text=True, capture_output=True, env=env, timeout=300)


def test_parts_replay_and_doubles_satisfy_the_seams(tmp_path):
    r = _mypy("tests/unit/seam_conformance.py", cache=tmp_path / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("Success: no issues found in 3 source files")


def test_a_drifted_stand_in_is_a_type_error(tmp_path):
    bad = tmp_path / "drifted.py"
    bad.write_text("from rlrun.parts.seams import RolloutPart\n\n\n"
                   "class Drifted:  # collect lost its `sampling` argument; no profiling, no prompts\n"
                   "    def collect(self, rollout_id: int) -> tuple[list, list, dict]:\n"
                   "        return [], [], {}\n\n\n"
                   "def as_seam(d: Drifted) -> RolloutPart:\n"
                   "    return d\n")
    r = _mypy(str(bad), cache=tmp_path / "cache")
    assert r.returncode == 1 and 'expected "RolloutPart"' in r.stdout, r.stdout + r.stderr
