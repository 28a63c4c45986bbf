"""The preflight: what `rlrun validate` cannot know from the config alone and a run would otherwise find out
20-55 s later inside a Ray worker. Paths exist and are readable (checkpoints, data, eval sets, custom
functions), data files parse (`file:line` of a bad row) and carry the configured keys, the HF config.json
agrees with model.*, the output dir is writable, the disk holds the planned checkpoints, a fixed router port is
free, and online wandb has credentials. Every check returns Problems (dotted key, value, fix); preflight() runs them all at once.

Where it runs: `rlrun run` before the run dir is made and before Ray starts (local clusters), `rlrun validate
--check-paths`, and on a remote cluster (cluster.address set) as a Ray task on the head node before
placement (rlrun.launch.cluster.preflight_on_head), where the paths are the cluster's. No torch, no ray here.
"""
from __future__ import annotations

import netrc
import os
import shutil
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional
from urllib.parse import urlparse

from rlrun.config.errors import Problem
from rlrun.config.hub import download_command
from rlrun.config.kinds import BACKENDS, use_critic
from rlrun.config.registry import Checks
from rlrun.config.schema import RunConfig

Check = Callable[[RunConfig, Any], Iterable[Problem]]  # (config, plan or None) -> problems
CHECKS: Checks[Check] = Checks()
check = CHECKS

# Keys naming a Python function ("package.module:function" or "path/to/file.py:function"), checked to exist.
FUNCTION_KEYS = ("data.rm_type", "rollout.generate_fn")
WANDB_HOST = "api.wandb.ai"
# What a model folder must hold besides config.json: (what, any of these globs). rlrun reads weights from
# *.safetensors only (rlrun.rollout.weights.load_hf_dir) and the tokenizer with transformers' AutoTokenizer.
WEIGHTS = ("weights (*.safetensors)", ("*.safetensors",))
TOKENIZER = ("tokenizer files", ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json"))


def preflight(cfg: RunConfig, plan: Any = None) -> list[Problem]:
    """Every preflight problem of `cfg` on this machine (plan: rlrun.config.plan.Plan, for the checkpoint size)."""
    return CHECKS.run(cfg, plan)


# ---- paths -------------------------------------------------------------------------------------------------

def _unreadable(key: str, path: str, want_dir: bool | None, what: str, fix: str) -> Optional[Problem]:
    p = Path(path).expanduser()
    if not p.exists():
        near = _existing_parent(p)
        return Problem(key, f"{path} does not exist ({what}; the nearest existing folder is {near})", fix, path)
    if want_dir is not None and p.is_dir() != want_dir:
        return Problem(key, f"{path} is a {'file' if want_dir else 'folder'}, {what} is a "
                       f"{'folder' if want_dir else 'file'}", fix, path)
    if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
        return Problem(key, f"{path} is not readable by this user ({what})", f"fix its permissions (chmod) or {fix}",
                       path)
    return None


def _existing_parent(p: Path) -> Path:
    p = p.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


@check
def checkpoints(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    from rlrun.config.hfcheck import compare, read_hf_config

    ck = cfg.checkpoint
    if ck.hf is not None and ck.hf == cfg.model.hub_id and not Path(ck.hf).expanduser().exists():
        from rlrun.config.hub import cache_dir

        yield Problem("checkpoint.hf", f"model={cfg.model.name} means the released weights of {ck.hf}, which are "
                      f"not in the local Hugging Face cache ({cache_dir()})",
                      f"download them (`{download_command(ck.hf)}`, found in the cache then), or set checkpoint.hf to "
                      "a model folder, or checkpoint.random_init=true for random weights from model.*", ck.hf)
    elif ck.hf is not None:
        bad = _unreadable("checkpoint.hf", ck.hf, True, "a Hugging Face model folder",
                          "point checkpoint.hf at a folder with config.json, *.safetensors and the tokenizer files")
        if bad:
            yield bad
        elif (hf := read_hf_config(ck.hf)) is None:
            yield Problem("checkpoint.hf", f"{ck.hf} has no config.json", "point checkpoint.hf at a Hugging Face "
                          "model folder (config.json + *.safetensors + tokenizer files)", ck.hf)
        else:
            yield from compare(cfg, hf, f"{ck.hf}/config.json")
            yield from _holds("checkpoint.hf", ck.hf, (WEIGHTS, TOKENIZER))
    if ck.ref is not None and ck.ref != ck.hf:  # (a ref equal to an uncached hub id is reported above)
        from rlrun.config.torch_dist import dist_checkpoint_dir

        bad = _unreadable("checkpoint.ref", ck.ref, True, "the reference model's folder",
                          "fix checkpoint.ref, or null to use checkpoint.hf")
        if bad:
            yield bad
        elif dist_checkpoint_dir(ck.ref) is not None and ck.hf is None and cfg.train.backend != "megatron":
            yield Problem("checkpoint.ref", f"{ck.ref} is a Megatron torch_dist checkpoint; the {cfg.train.backend} "
                          "backend builds the reference model from Hugging Face weights, and checkpoint.hf (the "
                          "conversion's source) is not set", "set checkpoint.hf to the HF model the torch_dist folder "
                          "was converted from, or train.backend=megatron (it reads torch_dist)", ck.ref)
        elif dist_checkpoint_dir(ck.ref) is None:  # a torch_dist folder beside checkpoint.hf: its HF weights
            yield from _holds("checkpoint.ref", ck.ref, (WEIGHTS,))
    if ck.load is not None:
        yield from _trainer_checkpoint(ck.load)


def _holds(key: str, path: str, wanted: tuple[tuple[str, tuple[str, ...]], ...]) -> Iterator[Problem]:
    folder = Path(path).expanduser()
    for what, globs in wanted:
        if not any(next(folder.glob(g), None) for g in globs):
            yield Problem(key, f"{path} has no {what} (looked for {', '.join(globs)})",
                          f"point {key} at a complete Hugging Face model folder (e.g. `{download_command()} --local-dir DIR`)",
                          path)


def _trainer_checkpoint(path: str) -> Iterator[Problem]:
    from rlrun.checkpoint import LATEST, find_latest

    fix = "point checkpoint.load at a run's checkpoints/ folder (with a `latest` file) or an iter_* folder, or set " \
          "checkpoint.load=null and run.resume=auto to continue a run by name"
    bad = _unreadable("checkpoint.load", path, True, "a trainer checkpoint folder", fix)
    if bad:
        yield bad
        return
    try:
        found = find_latest(path)
    except FileNotFoundError as exc:
        yield Problem("checkpoint.load", str(exc), fix, path)
        return
    if found is None:
        yield Problem("checkpoint.load", f"no complete checkpoint under {path} (neither {path}/{LATEST} nor "
                      f"{path}/driver.json)", fix, path)


@check
def data_files(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    d = cfg.data
    files = [("data.prompt_data", d.prompt_data)] if d.prompt_data is not None else []
    files += [(f"eval.datasets.{i}.path", ds.path) for i, ds in enumerate(cfg.eval.datasets)]
    for key, path in files:
        yield from _data_file(key, path, d.input_key, d.label_key, d.metadata_key)


def _data_file(key: str, path: str, input_key: str, label_key: Optional[str],
               metadata_key: Optional[str]) -> Iterator[Problem]:
    from rlrun.data.dataset import DataError, check_file

    bad = _unreadable(key, path, False, "a JSONL or Parquet prompt file", f"fix {key}")
    if bad:
        yield bad
        return
    try:
        check_file(path, input_key, label_key, metadata_key)
    except DataError as exc:
        text = str(exc)
        blamed = next((k for k in ("data.input_key", "data.label_key") if f"({k})" in text), key)
        yield Problem(blamed, text, _data_fix(blamed, key), path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        yield Problem(key, f"{path}: cannot be read ({type(exc).__name__}: {exc})", f"fix the file or {key}", path)


@check
def prompt_filter(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """data.max_prompt_len drops longer prompts when the dataset loads (rlrun.data.dataset.PromptDataset); a
    filter that leaves none stopped the run after Ray started. Counted here with the run's own tokenizer and
    dataset class (a readable file only: data_files reports the others)."""
    d = cfg.data
    if cfg.checkpoint.hf and not Path(cfg.checkpoint.hf).expanduser().is_dir():
        return  # a hub id: its tokenizer is not fetched here (the checkpoint checks cover checkpoint.hf)
    toy = cfg.checkpoint.hf is None  # the toy tokenizer: characters outside its vocabulary become <unk>
    if d.prompt_data is None or (d.max_prompt_len is None and not toy) or list(
            _data_file("data.prompt_data", d.prompt_data, d.input_key, d.label_key, d.metadata_key)):
        return
    from rlrun.data.dataset import DataError, PromptDataset
    from rlrun.data.tokenizer import tokenizer_for

    try:
        ds = PromptDataset(d.prompt_data, input_key=d.input_key, label_key=d.label_key, metadata_key=d.metadata_key,
                           tokenizer=tokenizer_for(cfg), apply_chat_template=d.apply_chat_template,
                           max_prompt_len=d.max_prompt_len, shuffle=False)
        if ds.num_unk:  # valid, but not what the user meant: a note, counted (docs/data.md, the toy vocabulary)
            import sys

            print(f"note: data.prompt_data: {ds.num_unk} of {len(ds.items) + ds.num_filtered} prompts hold characters "
                  "outside the toy tokenizer's vocabulary (digits, space, +-*=:?, a-z); they become <unk>",
                  file=sys.stderr)
    except DataError as exc:
        shortest = str(exc).split("shortest ")[1].split(",")[0] if "shortest " in str(exc) else None
        fix = (f"raise data.max_prompt_len to at least {shortest} (null: no filter), or shorten the prompts"
               if shortest else "fix the data file or the data.* keys")
        yield Problem("data.max_prompt_len" if shortest else "data.prompt_data", str(exc), fix, d.max_prompt_len)
    except (OSError, ValueError) as exc:  # a tokenizer that cannot load: the checkpoint checks say why
        if not cfg.checkpoint.hf:
            yield Problem("data.prompt_data", f"{d.prompt_data}: cannot be tokenized ({type(exc).__name__}: {exc})",
                          "fix the file", d.prompt_data)


def _data_fix(blamed: str, key: str) -> str:
    if blamed == "data.input_key":
        return "set data.input_key to the key that holds the prompt in every row (see the row's keys above)"
    if blamed == "data.label_key":
        return "set data.label_key to the key that holds the answer, or null for unlabelled data"
    return f"fix that row of the file (or point {key} at another file)"


@check
def functions(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    specs = [(k, _get(cfg, k)) for k in FUNCTION_KEYS]
    specs += [(f"eval.datasets.{i}.rm_type", ds.rm_type) for i, ds in enumerate(cfg.eval.datasets)
              if ds.rm_type != cfg.data.rm_type]
    for key, spec in specs:
        if isinstance(spec, str) and ":" in spec:
            yield from _function(key, spec)


def _get(cfg: RunConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part, None)
    return node


def _function(key: str, spec: str) -> Iterator[Problem]:
    """The check of rlrun.userfn, the loader the run uses: the file or module exists and defines the name.
    A slime function (slime:<path>, rlrun.agent.slime_adapter) is checked by its path."""
    from rlrun.userfn import problems

    slime = "slime:"
    for message, fix in problems(spec[len(slime):] if spec.startswith(slime) else spec):
        yield Problem(key, message, f"{fix} ({key})", spec)


# ---- outputs -----------------------------------------------------------------------------------------------

def _writable(key: str, path: str) -> Optional[Problem]:
    near = _existing_parent(Path(path).expanduser())
    if not near.is_dir():
        return Problem(key, f"{path}: {near} is a file, so the folder cannot be made", f"set {key} to a folder", path)
    if not os.access(near, os.W_OK | os.X_OK):
        made = "" if near == Path(path).expanduser().absolute() else f" (it would be made inside {near})"
        return Problem(key, f"{path} is not writable by this user{made}",
                       f"set {key} to a folder you can write, or fix the permissions of {near}", path)
    return None


def _save_dir(cfg: RunConfig) -> tuple[str, str]:
    return ("checkpoint.save", cfg.checkpoint.save) if cfg.checkpoint.save else ("run.output_dir", cfg.run.output_dir)


@check
def outputs(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    seen = set()
    for key, path in (("run.output_dir", cfg.run.output_dir), _save_dir(cfg)):
        if path not in seen and (bad := _writable(key, path)):
            yield bad
        seen.add(path)


def checkpoint_count(cfg: RunConfig) -> int:
    """Checkpoints on disk at the peak: one every save_interval rollouts plus the final one (the loop saves
    both); with checkpoint.keep_last=K, K + 1 (a new checkpoint is complete before the oldest is deleted)."""
    n, every, keep = cfg.rollout.num_rollout, cfg.checkpoint.save_interval, cfg.checkpoint.keep_last
    saves = n // every + (n % every != 0) if every else 1
    return min(saves, keep + 1) if keep else saves


def checkpoint_bytes(cfg: RunConfig, params: int) -> int:
    """Bytes one saved checkpoint holds (the backend's spec: rlrun.config.kinds.BackendKind.checkpoint_bytes);
    a critic saves a second model and optimizer."""
    per = BACKENDS[cfg.train.backend].checkpoint_bytes.get(cfg.optim.state_dtype, 14)
    critic = 2 if use_critic(cfg) else 1
    return params * per * critic


@check
def disk(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    from rlrun.config.params import count_params

    key, path = _save_dir(cfg)
    near = _existing_parent(Path(path).expanduser())
    if not near.is_dir():
        return  # reported by outputs()
    params = plan.params_total if plan is not None else count_params(cfg.model).total
    count, each = checkpoint_count(cfg), checkpoint_bytes(cfg, params)
    free = shutil.disk_usage(near).free
    if count * each > free:
        fits = max(free // each, 0)
        keep = (f"keep fewer (checkpoint.keep_last={fits - 1}: {fits - 1} kept + the one being written), "
                if fits >= 2 else "")
        blamed = ("checkpoint.keep_last", cfg.checkpoint.keep_last) if cfg.checkpoint.keep_last else \
            ("checkpoint.save_interval", cfg.checkpoint.save_interval) if cfg.checkpoint.save_interval else (key, path)
        yield Problem(blamed[0], f"{count} checkpoint(s) of ~{_gib(each)} ({params / 1e9:.2f} B params x "
                      f"{each // params} B) need {_gib(count * each)}, but {near} has {_gib(free)} free",
                      f"{keep}save less often (checkpoint.save_interval; {fits} checkpoint(s) fit), or point "
                      f"{key} at a bigger disk", blamed[1])


def _gib(n: int) -> str:
    return f"{n / 1024 ** 3:.1f} GiB"


@check
def router_port(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """A fixed rollout.router.port must be free where the driver starts the router (null: rlrun picks one)."""
    host, port = cfg.rollout.router.host, cfg.rollout.router.port
    if port is None:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the router binds: TIME_WAIT does not count
        try:
            s.bind((host, port))
        except OSError as exc:
            yield Problem("rollout.router.port", f"sglang-router cannot listen on {host}:{port} here: {exc.strerror}",
                          "choose a free port, or null to let rlrun pick one (check rollout.router.host too)", port)


# ---- credentials -------------------------------------------------------------------------------------------

@check
def wandb_credentials(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    if cfg.logging.wandb.mode != "online" or os.environ.get("WANDB_API_KEY"):
        return
    host = urlparse(os.environ.get("WANDB_BASE_URL", "")).hostname or WANDB_HOST
    if _netrc_has(host):
        return
    yield Problem("logging.wandb.mode", f"online logging needs wandb credentials, but WANDB_API_KEY is not set and "
                  f"~/.netrc has no entry for {host} (the run would log offline instead)",
                  "export WANDB_API_KEY (or run `wandb login`), or set logging.wandb.mode=offline", "online")


def _netrc_has(host: str) -> bool:
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return netrc.netrc(str(path)).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
