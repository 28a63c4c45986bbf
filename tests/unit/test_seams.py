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


def test_the_loops_and_parts_type_check_against_the_seams(tmp_path):
    """src/rlrun/loops and src/rlrun/parts under mypy: the loops take `p: Parts`, so a call a seam lacks (or a
    part that stopped matching its seam) is an error here."""
    r = subprocess.run([MYPY, "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                        "src/rlrun/loops", "src/rlrun/parts"], cwd=ROOT, text=True, capture_output=True, timeout=300)
    assert r.returncode == 0 and "Success: no issues found" in r.stdout, r.stdout + r.stderr
    assert all("p: Parts" in (ROOT / "src/rlrun/loops" / f).read_text()
               for f in ("sync_loop.py", "async_loop.py", "phases.py"))


def test_a_call_the_seams_lack_is_a_type_error(tmp_path):
    bad = tmp_path / "loop.py"
    bad.write_text("from rlrun.parts import Parts\n\n\n"
                   "def run(p: Parts) -> None:\n"
                   "    p.trainer.export_weights(None)  # not on TrainerPart: the loops must not reach it\n")
    r = subprocess.run([MYPY, "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                        str(bad)], cwd=ROOT, text=True, capture_output=True, timeout=300,
                       env=dict(os.environ, MYPYPATH=str(ROOT / "src")))
    assert r.returncode == 1 and '"TrainerPart" has no attribute "export_weights"' in r.stdout, r.stdout + r.stderr
