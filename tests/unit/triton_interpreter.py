"""Run rlrun's Triton kernels on the CPU: a fresh Python with TRITON_INTERPRET=1, which must be set
before Triton is imported (so not in the pytest process). Shared by the kernel tests."""
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlrun

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="needs Triton (its interpreter runs on the CPU)")


def run_interpreted(code: str) -> list[float]:
    """Run `code` (dedented) under Triton's interpreter; its stdout is whitespace-separated numbers."""
    src = str(Path(rlrun.__file__).parents[1])
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([src] + sys.path))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [float(x) for x in out.stdout.split()]
