"""`rlrun export NAME`: the launchers for schedulers (name -> render(cfg, plan, overrides, config_dir) -> text).

`export slime` is interop (rlrun.interop.slime) and is routed there by the CLI. Imports neither torch
nor ray: the renderers only read the config and the plan.
"""
from __future__ import annotations

from rlrun.launch import kuberay, slurm

EXPORTERS = {"slurm": slurm.render, "kuberay": kuberay.render}
