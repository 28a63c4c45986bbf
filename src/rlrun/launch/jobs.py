"""`rlrun submit | jobs | logs | stop`: runs on a running Ray cluster through Ray's Jobs API.

    rlrun submit [overrides] --address http://HEAD:8265 [--follow] [--config-dir DIR] [--working-dir DIR]

The config is validated and planned here (the caller did that: ConfigError exits 2 before this
module runs), the plan is checked against the cluster's live nodes (counts per node and the
accelerator type, read through Ray's state API without joining the cluster), and the job is
submitted with ray.job_submission.JobSubmissionClient. Its runtime_env carries the working dir
(default: the current dir, i.e. the user's project with its experiment files and config dir;
outputs/ and VCS/venv dirs excluded) and this rlrun as a py_module (the package with its conf/ inside:
`ship`), so the job, its trainer ranks and engines import the rlrun that validated the config, whether or
not the cluster has one (Ray puts py_modules first on their PYTHONPATH). On the cluster the entrypoint is
`python -m rlrun.cli run <overrides> cluster.address=auto` (the cluster's `python`, the one Ray runs on,
as in Ray's own job examples; it needs rlrun's dependencies, not rlrun), which joins the cluster the job
runs in.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Never uploaded: run outputs, VCS and virtual envs, caches (Ray's runtime_env "excludes" syntax: gitignore)
EXCLUDES = ["outputs/", ".git/", ".venv/", "venv/", "__pycache__/", "*.pyc", "wandb/", ".pytest_cache/"]
# A submitted job's driver joins the cluster it runs in; RAY_ADDRESS is set for it by the Jobs API.
CLUSTER_ADDRESS = "cluster.address=auto"
# The job's command: rlrun from the shipped py_module, run by the cluster's python (no `rlrun` script needed there)
ENTRYPOINT = ["python", "-m", "rlrun.cli", "run"]
SHIP_IGNORE = ("__pycache__", "*.pyc", "*.pyo")
# `stop`: Ray's job supervisor sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s by
# default, ray/dashboard/modules/job/job_supervisor.py). The runner turns SIGTERM into its ordered
# teardown (engines, router, placement group, the plot), which takes longer than 3 s on a busy node:
# the supervisor gets this grace period through the job's runtime_env.
STOP_GRACE_S = 30
STATUS_WAIT_S = STOP_GRACE_S + 30.0


class SubmitError(Exception):
    """A usage problem found before anything was submitted (the CLI exits 2)."""


def dashboard_address(address: str | None) -> str:
    """--address, else $RAY_ADDRESS; a bare host:port gets http:// (the Jobs API is HTTP)."""
    addr = address or os.environ.get("RAY_ADDRESS")
    if not addr:
        raise SubmitError("no Ray cluster given: pass --address http://HEAD:8265 (the dashboard / Jobs API "
                          "address) or set RAY_ADDRESS")
    return addr if "://" in addr else f"http://{addr}"


def client(address: str | None):
    """A Jobs API client that carries Ray's auth token when one is found here (rlrun.launch.auth)."""
    from ray.job_submission import JobSubmissionClient

    from rlrun.launch import auth

    return JobSubmissionClient(dashboard_address(address), headers=auth.headers())


@dataclass(frozen=True)
class Submission:
    entrypoint: str
    runtime_env: dict
    submission_id: str
    run_dir: str      # where the run dir will be on the cluster (its timestamp is chosen there)


def ship(stage: Path) -> str:
    """A copy of this rlrun under `stage` for the job's runtime_env py_modules: the package, with the conf/ tree
    this process composes from inside it (rlrun.config.compose finds it there first). SubmitError when there is
    no such package folder to copy (e.g. rlrun imported from a zip)."""
    import rlrun
    from rlrun.config.compose import CONF_DIR

    package = Path(rlrun.__file__).resolve().parent
    if not (package / "cli.py").is_file() or not (Path(CONF_DIR) / "config.yaml").is_file():
        raise SubmitError(f"cannot ship rlrun to the job: {package} is not rlrun's package folder or {CONF_DIR} has "
                          "no config.yaml; install rlrun from its source (pip install -e .) or set RLRUN_CONF_DIR")
    dest = stage / "rlrun"
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns(*SHIP_IGNORE))
    if Path(CONF_DIR).resolve() != (package / "conf").resolve():
        shutil.copytree(CONF_DIR, dest / "conf", ignore=shutil.ignore_patterns(*SHIP_IGNORE))
    return str(dest)


def prepare(cfg, overrides: list[str], config_dir: str | None, working_dir: str | None, stage: Path,
            now: float | None = None) -> Submission:
    """What to submit: the entrypoint (overrides with cluster.address=auto), the runtime_env that
    carries `working_dir` (the config dir must lie inside it: the job sees it by its relative path) and
    rlrun itself (a copy made under `stage`, which must live until the job is submitted), a submission id
    and where the run dir will be."""
    wd = Path(working_dir or os.getcwd()).resolve()
    if not wd.is_dir():
        raise SubmitError(f"--working-dir {wd} is not a directory")
    args = [*ENTRYPOINT, *(o for o in overrides if not o.startswith("cluster.address=")), CLUSTER_ADDRESS]
    if config_dir:
        cd = Path(config_dir).resolve()
        if not cd.is_relative_to(wd):
            raise SubmitError(f"--config-dir {cd} is outside the working dir {wd}, so the job would not see it; "
                              f"run submit from a dir that holds it, or pass --working-dir")
        args += ["--config-dir", str(cd.relative_to(wd))]
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    out = Path(cfg.run.output_dir)
    where = f"{out / cfg.run.name}/<timestamp>"
    if not out.is_absolute():
        where += " (relative to the job's working dir on the head node, which Ray deletes with the job's " \
                 "session: set run.output_dir to a shared absolute path to keep it)"
    return Submission(entrypoint=shlex.join(args),
                      runtime_env={"working_dir": str(wd), "excludes": list(EXCLUDES), "py_modules": [ship(stage)],
                                   "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S)}},
                      submission_id=f"rlrun-{cfg.run.name}-{stamp}", run_dir=where)


def check_cluster(cfg, plan, dashboard: str) -> list[str]:
    """Plan vs the live cluster: raises cluster.ResourceError when it does not fit; returns notes."""
    from rlrun.launch import cluster

    nodes = cluster.live_nodes(dashboard)
    cluster.check_resources(plan, cfg.hardware.vendor, nodes)
    note = cluster.check_accelerator(cfg.hardware.name, cfg.hardware.vendor, nodes)
    return [note] if note else []


def submit(cfg, plan, overrides: list[str], *, address: str | None, config_dir: str | None,
           working_dir: str | None, follow: bool) -> int:
    from rlrun.launch.cluster import ResourceError

    dashboard = dashboard_address(address)
    try:
        notes = check_cluster(cfg, plan, dashboard)
    except ResourceError as e:
        print(f"rlrun submit: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}")
    with tempfile.TemporaryDirectory(prefix="rlrun-ship-") as stage:  # uploaded by submit_job, then not needed
        sub = prepare(cfg, overrides, config_dir, working_dir, Path(stage))
        job = client(dashboard).submit_job(entrypoint=sub.entrypoint, runtime_env=sub.runtime_env,
                                           submission_id=sub.submission_id, metadata={"rlrun_run_name": cfg.run.name})
    print(f"submitted job {job} to {dashboard}\n  entrypoint: {sub.entrypoint}\n  run dir on the cluster: {sub.run_dir}")
    print(f"  follow: rlrun logs {job} --address {dashboard}   stop: rlrun stop {job} --address {dashboard}")
    return follow_job(dashboard, job) if follow else 0


def follow_job(address: str | None, job: str) -> int:
    """Stream the job's logs until it ends; 0 when it succeeded, 1 otherwise."""
    from ray.job_submission import JobStatus

    c = client(address)

    async def tail() -> None:
        async for lines in c.tail_job_logs(job):
            print(lines, end="", flush=True)

    asyncio.run(tail())
    status = _wait_terminal(c, job, STATUS_WAIT_S)  # the stream can close a moment before the status is final
    print(f"job {job}: {status.value}")
    return 0 if status == JobStatus.SUCCEEDED else 1


def _wait_terminal(c, job: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    status = c.get_job_status(job)
    while not status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
        status = c.get_job_status(job)
    return status


def list_jobs(address: str | None) -> int:
    rows = sorted(client(address).list_jobs(), key=lambda j: j.start_time or 0)
    print(f"{'submission id':40} {'status':10} entrypoint")
    for j in rows:
        print(f"{(j.submission_id or j.job_id or '-'):40} {j.status.value:10} {j.entrypoint}")
    return 0


def logs(address: str | None, job: str, follow: bool) -> int:
    if follow:
        return follow_job(address, job)
    print(client(address).get_job_logs(job), end="")
    return 0


def stop(address: str | None, job: str) -> int:
    """Ask Ray to stop the job (SIGTERM to its driver, which tears the run down); wait for its end."""
    c = client(address)
    if not c.stop_job(job):
        print(f"job {job} was not running: {c.get_job_status(job).value}")
        return 0
    status = _wait_terminal(c, job, STATUS_WAIT_S)
    print(f"job {job}: {status.value}")
    return 0 if status.is_terminal() else 1
