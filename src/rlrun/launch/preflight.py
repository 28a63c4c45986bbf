"""The preflight: what `rlrun validate` cannot know from the config alone and a run would otherwise find out
20-55 s later inside a Ray worker. Paths exist and are readable (checkpoints, data, eval sets, custom
functions), data files parse (`file:line` of a bad row) and carry the configured keys, the data fits the run
(prompts without <unk>, labels within rollout.max_response_len), a custom reward takes (response, label,
metadata) and returns a number on a real row, the HF config.json agrees with model.*, the output dir is
writable, the disk holds the planned checkpoints, a fixed router port is free, online wandb has credentials,
and without cluster.address the embedded Ray this machine would start holds the plan (GPUs, the engine's and
backend's modules). Every check returns Problems (dotted key, value, fix); preflight() runs them all at once.

Where it runs: `rlrun run` before the run dir is made and before Ray starts (local clusters), `rlrun validate
--check-paths`, and on a remote cluster (cluster.address set) as a Ray task on the head node before
placement (rlrun.launch.cluster.preflight_on_head), where the paths are the cluster's. No torch, no ray here.
"""
from __future__ import annotations

import netrc
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional
from urllib.parse import urlparse

from rlrun.config.errors import Problem
from rlrun.config.hfcheck import compare, read_hf_config
from rlrun.config.hub import download_command
from rlrun.config.kinds import (BACKENDS, ENGINES, TEACHERS, label_in_response, resolve, trainer_teacher,
                                use_critic, use_reward_model)
from rlrun.config.memory import engine_weight_bytes
from rlrun.config.params import count_params
from rlrun.config.plan import make_plan
from rlrun.config.registry import Checks
from rlrun.config.schema import RunConfig
from rlrun.config.torch_dist import dist_checkpoint_dir

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
    yield from _teacher(cfg)
    yield from _reward_model(cfg)


def _reward_model(cfg: RunConfig) -> Iterator[Problem]:
    """reward.model.checkpoint: an HF model folder the reward engines load (weights and tokenizer), whose tokenizer
    spells a fixed discriminative target as one token."""
    m = cfg.reward.model
    if not use_reward_model(cfg):
        return
    bad = _unreadable("reward.model.checkpoint", m.checkpoint, True, "the reward model's Hugging Face folder",
                      "point reward.model.checkpoint at a folder with config.json, *.safetensors and the tokenizer "
                      "files (an rlrun checkpoint's iter_N/trainer/model is one)")
    if bad:
        yield bad
        return
    if read_hf_config(m.checkpoint) is None:
        yield Problem("reward.model.checkpoint", f"{m.checkpoint} has no config.json", "point "
                      "reward.model.checkpoint at a Hugging Face model folder", m.checkpoint)
        return
    held = list(_holds("reward.model.checkpoint", m.checkpoint, (WEIGHTS, TOKENIZER)))
    yield from held
    if held or m.mode != "discriminative" or "{" in m.target:
        return  # a target with fields is tokenized per sample; one that is not one token scores it as an error
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(m.checkpoint).encode(m.target, add_special_tokens=False)
    if len(ids) != 1:
        yield Problem("reward.model.target", f"{m.target!r} is {len(ids)} tokens ({ids}) for the reward model's "
                      "tokenizer; a discriminative judge scores the probability of one next token",
                      "use a target the tokenizer spells as one token (e.g. 'yes' or ' yes')", m.target)


def _teacher(cfg: RunConfig) -> Iterator[Problem]:
    """algo.distill.teacher: an HF model folder of model.*'s architecture (the trainer builds it from model.*)."""

    teacher = cfg.algo.distill.teacher
    if teacher is None:
        return
    bad = _unreadable("algo.distill.teacher", teacher, True, "the teacher's Hugging Face model folder",
                      "point algo.distill.teacher at a folder with config.json and *.safetensors (an rlrun "
                      "checkpoint's iter_N/trainer/model is one)")
    if bad:
        yield bad
        return

    if dist_checkpoint_dir(teacher) is not None:  # slime's --opd-teacher-load form
        if cfg.train.backend != "megatron":
            yield Problem("algo.distill.teacher", f"{teacher} is a Megatron torch_dist checkpoint; the "
                          f"{cfg.train.backend} backend builds the teacher from Hugging Face weights",
                          "point algo.distill.teacher at the HF dir it was converted from, or train.backend=megatron",
                          teacher)
        return
    hf = read_hf_config(teacher)
    if hf is None:
        yield Problem("algo.distill.teacher", f"{teacher} has no config.json", "point algo.distill.teacher at a "
                      "Hugging Face model folder", teacher)
        return
    if not trainer_teacher(cfg):  # served: any architecture an engine serves, scoring the student's token ids
        if hf.get("vocab_size") != cfg.model.vocab_size:
            yield Problem("algo.distill.teacher", f"the served teacher's vocab_size {hf.get('vocab_size')} differs "
                          f"from the student's model.vocab_size {cfg.model.vocab_size}: it would score other "
                          "tokens than the student sampled", "serve a teacher of the student's tokenizer", teacher)
        yield from _holds("algo.distill.teacher", teacher, (WEIGHTS, TOKENIZER))
        return
    for p in compare(cfg, hf, f"{teacher}/config.json"):  # the teacher is built from model.*, as the student
        yield Problem("algo.distill.teacher", f"the teacher's architecture differs from the student's: {p.path} "
                      f"{p.message}", "distil from a teacher of the student's model.* (same sizes and tokenizer)",
                      teacher)
    yield from _holds("algo.distill.teacher", teacher, (WEIGHTS,))


@check
def teacher_url(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """algo.distill.url: an external teacher server the run asks; its host must accept a connection now."""
    from urllib.parse import urlsplit

    url = cfg.algo.distill.url
    if url is None or not TEACHERS[cfg.algo.distill.where].served:
        return
    parts = urlsplit(url)
    if not parts.hostname:
        return  # not a URL: the rules refuse it
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=5).close()
    except OSError as e:
        yield Problem("algo.distill.url", f"the teacher server {parts.hostname}:{port} does not answer ({e})",
                      "start the teacher server first (slime's script launches its teacher's server before "
                      "train.py), or let rlrun serve it: algo.distill.teacher=<HF dir>, algo.distill.url=null", url)


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
        for blamed in [k for k in ("data.input_key", "data.label_key") if f"({k})" in text] or [key]:
            yield Problem(blamed, text, _data_fix(blamed, key), path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        yield Problem(key, f"{path}: cannot be read ({type(exc).__name__}: {exc})", f"fix the file or {key}", path)


@check
def data_against_the_run(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """The data against the run, with the run's own tokenizer and dataset class (rlrun.data.dataset.PromptDataset;
    a readable file only: data_files reports the others): data.max_prompt_len drops longer prompts when the dataset
    loads (a filter that leaves none stopped the run after Ray started); prompts the tokenizer reads as <unk>
    (the toy tokenizer knows lower-case letters, digits and a few signs); labels that no response of
    rollout.max_response_len tokens can hold, where the reward compares the response with the label."""
    d = cfg.data
    if cfg.checkpoint.hf and not Path(cfg.checkpoint.hf).expanduser().is_dir():
        return  # a hub id: its tokenizer is not fetched here (the checkpoint checks cover checkpoint.hf)
    if d.prompt_data is None or list(
            _data_file("data.prompt_data", d.prompt_data, d.input_key, d.label_key, d.metadata_key)):
        return
    from rlrun.data.dataset import DataError, PromptDataset
    from rlrun.data.tokenizer import tokenizer_for

    try:
        tokenizer = tokenizer_for(cfg)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a broken folder
        if not cfg.checkpoint.hf:
            raise
        print(f"note: checkpoint.hf: its tokenizer does not load here ({type(exc).__name__}: {exc}); the data was "
              "not checked against it", file=sys.stderr)
        return
    if d.max_prompt_len is not None:  # the filter: the dataset class itself, chat template and all
        try:
            PromptDataset(d.prompt_data, input_key=d.input_key, label_key=d.label_key, metadata_key=d.metadata_key,
                          tokenizer=tokenizer, apply_chat_template=d.apply_chat_template,
                          max_prompt_len=d.max_prompt_len, shuffle=False)
        except DataError as exc:
            shortest = str(exc).split("shortest ")[1].split(",")[0] if "shortest " in str(exc) else None
            fix = (f"raise data.max_prompt_len to at least {shortest} (null: no filter), or shorten the prompts"
                   if shortest else "fix the data file or the data.* keys")
            yield Problem("data.max_prompt_len" if shortest else "data.prompt_data", str(exc), fix, d.max_prompt_len)
            return
        except (OSError, ValueError) as exc:
            yield Problem("data.prompt_data", f"{d.prompt_data}: cannot be tokenized ({type(exc).__name__}: {exc})",
                          "fix the file", d.prompt_data)
            return
    prompts, labels = _texts(cfg)
    vocab = ("the toy tokenizer's vocabulary (lower-case a-z, digits, space, +-*=:?; checkpoint.hf is null)"
             if cfg.checkpoint.hf is None else f"the vocabulary of {cfg.checkpoint.hf}'s tokenizer")
    unk = getattr(tokenizer, "unk_token_id", None)
    # <unk> depends on the text only (a chat template adds known tokens): one batched call, no template
    num_unk = 0 if unk is None else sum(unk in ids for ids in _ids(tokenizer, prompts))
    if num_unk:
        yield Problem("data.prompt_data", f"{num_unk} of {len(prompts)} prompts hold characters outside {vocab}: they "
                      "become <unk>, which the policy cannot read", "keep the prompts inside the vocabulary (e.g. "
                      "lower-case them) or set checkpoint.hf to a model whose tokenizer covers them", d.prompt_data)
    yield from _labels_fit(cfg, labels, tokenizer, vocab)


def _texts(cfg: RunConfig) -> tuple[list[str], list[str]]:
    """The prompts' text (a chat's contents joined) and the labels (as text) of data.prompt_data, as read by the
    dataset class's row reader."""
    from rlrun.data.dataset import read_rows, row_fields

    d = cfg.data
    prompts, labels = [], []
    for where, row in read_rows(Path(d.prompt_data).expanduser()):
        prompt, _ = row_fields(where, row, d.input_key, d.label_key, d.metadata_key)
        prompts.append(prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt))
        if d.label_key and row.get(d.label_key) is not None:
            labels.append(str(row[d.label_key]))
    return prompts, labels


def _ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []


def _labels_fit(cfg: RunConfig, labels: list[str], tokenizer: Any, vocab: str) -> Iterator[Problem]:
    """Labels a response of rollout.max_response_len tokens cannot hold (or cannot spell: <unk>), for a reward that
    compares the response with the label (its RewardKind's label_in_response); for a custom reward a note."""

    limit, unk = cfg.rollout.max_response_len, getattr(tokenizer, "unk_token_id", None)
    distinct = list(dict.fromkeys(labels))
    lengths = [(len(ids), unk is not None and unk in ids, text) for text, ids in zip(distinct, _ids(tokenizer, distinct))]
    long = {text: n for n, _, text in lengths if n > limit}
    spelled = {text for _, has_unk, text in lengths if has_unk}
    count = lambda texts: sum(label in texts for label in labels)  # noqa: E731 - rows, not distinct labels
    rm_type, problems = cfg.data.rm_type, []
    if long:
        need, example = max((n, text) for text, n in long.items())
        problems.append(Problem("rollout.max_response_len", f"{count(long)} of {len(labels)} labels (data.label_key="
                                f"{cfg.data.label_key}) are longer than rollout.max_response_len={limit} tokens (the "
                                f"longest, {example[:60]!r}, is {need}): no response can hold them, so data.rm_type="
                                f"{rm_type} scores those prompts 0", f"raise rollout.max_response_len to at least "
                                f"{need}, or drop those rows", limit))
    if spelled:
        problems.append(Problem("data.prompt_data", f"{count(spelled)} of {len(labels)} labels hold characters "
                                f"outside {vocab}: no response can spell them, so data.rm_type={rm_type} scores those "
                                "prompts 0", "keep the labels inside the vocabulary (e.g. lower-case them) or set "
                                "checkpoint.hf to a model whose tokenizer covers them", cfg.data.prompt_data))
    if label_in_response(rm_type):
        yield from problems
    elif problems and ":" in rm_type:  # a custom reward may not compare the response with the label: say so only
        for p in problems:
            print(f"note: {p.path}: {p.message.replace(f'so data.rm_type={rm_type} scores', 'so a reward that compares the response with the label scores')}",
                  file=sys.stderr)


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


REWARD_CALL_TIMEOUT_S = 30.0  # the preflight's one call of a custom reward; longer: a note, not a problem
SLIME_PREFIX = "slime:"     # a slime function (rlrun.agent.slime_adapter): slime's own signature, not called here


@check
def reward_call(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """A custom reward (data.rm_type, an eval set's rm_type) is called once, as the run calls it, on the first
    row of its data: a wrong signature or a function that raises fails here, not as 0 reward on every sample."""
    d = cfg.data
    targets = [("data.rm_type", d.rm_type, d.prompt_data)]
    targets += [(f"eval.datasets.{i}.rm_type", ds.rm_type, ds.path) for i, ds in enumerate(cfg.eval.datasets)
                if ds.rm_type != d.rm_type]
    for key, spec, path in targets:
        if isinstance(spec, str) and ":" in spec and not spec.startswith(SLIME_PREFIX) and not list(_function(key, spec)):
            yield from _call_reward(cfg, key, spec, path)


def _first_row(cfg: RunConfig, path: Optional[str]) -> Optional[tuple[str, Any, dict]]:
    """(where, label, metadata) of the data's first row (the toy task's when path is None); None if unreadable."""
    from rlrun.data.dataset import DataError, read_rows, row_fields

    d = cfg.data
    if path is None:
        from rlrun.data.toy import toy_dataset

        row = toy_dataset(1, cfg.run.seed, d.toy_task)[0]
        return f"the toy task ({d.toy_task})", row["label"], row["metadata"]
    try:
        where, row = next(read_rows(Path(path).expanduser()))
        _, metadata = row_fields(where, row, d.input_key, d.label_key, d.metadata_key)
    except (DataError, OSError, StopIteration, UnicodeDecodeError, ValueError):
        return None  # data_files reports it
    return where, row.get(d.label_key) if d.label_key else None, dict(metadata or {})


def _call_reward(cfg: RunConfig, key: str, spec: str, path: Optional[str]) -> Iterator[Problem]:
    import inspect
    import threading

    from rlrun.reward import score
    from rlrun.reward.custom import is_per_group, load_function

    try:
        fn = load_function(spec)
    except Exception as exc:  # noqa: BLE001 - the user's module raised while it was imported
        yield Problem(key, f"{spec}: importing it raised {type(exc).__name__}: {exc}", f"fix the module ({key})", spec)
        return
    call = fn.__call__ if isinstance(fn, type) else fn
    names = "(responses, labels, metadatas)" if isinstance(fn, type) or is_per_group(fn) else \
        "(response, label, metadata)"
    try:
        sig = inspect.signature(call)
        (sig.bind(None, None, None, None) if isinstance(fn, type) else sig.bind(None, None, None))
    except TypeError as exc:
        params = ", ".join(p for p in sig.parameters if p != "self")
        yield Problem(key, f"{spec} takes ({params}), but rlrun calls it as {spec.rpartition(':')[2]}{names}: {exc}",
                      f"give it three parameters: def {spec.rpartition(':')[2]}{names[:-1]}=None) "
                      "(docs/rewards.md)", spec)
        return
    except ValueError:  # no signature to read (a builtin): the call below tells
        pass
    if isinstance(fn, type):
        return  # a reward class loads its model when built: the run builds it, not the preflight
    row = _first_row(cfg, path)
    if row is None:
        return
    where, label, metadata = row
    response = "" if label is None else str(label)  # the answer itself: a correct response
    box: dict[str, Any] = {}

    def probe() -> None:
        try:
            box["value"] = score(spec, response, label, metadata, remote_url=cfg.data.rm_url)
        except Exception as exc:  # noqa: BLE001 - reported as the problem
            box["error"] = exc

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(REWARD_CALL_TIMEOUT_S)
    if t.is_alive():
        print(f"note: {key}: {spec} did not return within {REWARD_CALL_TIMEOUT_S:g} s on {where}; not checked "
              "further (the run limits each sample's reward time)", file=sys.stderr)
    elif "error" in box:
        exc = box["error"]
        yield Problem(key, f"{spec} raised {type(exc).__name__}: {exc} when called on {where} as "
                      f"{spec.rpartition(':')[2]}(response={response!r}, label={label!r}, metadata={metadata!r})",
                      "fix the function: it must return a number for every response (docs/rewards.md); the run "
                      "would score every sample 0", spec)


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


def _quantization(path: str) -> dict | None:
    """config.json's quantization_config of a local HF dir (None: none, or not a local dir)."""
    p = Path(path).expanduser()
    return ((read_hf_config(str(p)) or {}).get("quantization_config") or None) if p.is_dir() else None


@check
def quantized_checkpoint(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """The trainer builds its bf16 (or fp32) model from checkpoint.hf; a quantized checkpoint (an FP8 one such as
    Qwen3-4B-FP8) would reach it as FP8 values without their scales (megatron's HF load) or as quantized layers
    (transformers), and rlrun has no low-precision training. rollout.fp8 needs the bf16 weights: rlrun writes the
    engines' FP8 copy itself (rlrun.runner.write_engine_init_dir)."""
    q = _quantization(cfg.checkpoint.hf) if cfg.checkpoint.hf else None
    if q is not None:
        yield Problem("checkpoint.hf", f"{cfg.checkpoint.hf} is a quantized checkpoint (config.json quantization_config "
                      f"quant_method={q.get('quant_method')!r}), which the trainer cannot train from",
                      "point checkpoint.hf at the model's bf16 weights (e.g. Qwen/Qwen3-4B, not Qwen/Qwen3-4B-FP8); "
                      "for FP8 engines set rollout.fp8=true: rlrun writes their FP8 copy itself", cfg.checkpoint.hf)


@check
def fp8_engine_init(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """rollout.fp8 with checkpoint.hf: the runner writes its FP8 copy for the engines into the run dir
    (rlrun.runner.write_engine_init_dir; engine_weight_bytes(fp8=True): about half the bf16 weights), one shard at a
    time. A random init is converted in place (one shard's worth of extra space)."""
    hf = cfg.checkpoint.hf
    if not cfg.rollout.fp8 or not hf or not Path(hf).expanduser().is_dir() or _quantization(hf) is not None:
        return  # a quantized checkpoint.hf: quantized_checkpoint
    near = _existing_parent(Path(cfg.run.output_dir).expanduser())
    if not near.is_dir():
        return  # reported by outputs()
    need = int(engine_weight_bytes(cfg.model, count_params(cfg.model), fp8=True))
    free = shutil.disk_usage(near).free
    if need > free:
        yield Problem("run.output_dir", f"rollout.fp8: the engines' FP8 copy of {hf} (~{_gib(need)}) is written under "
                      f"the run dir, but {near} has {_gib(free)} free", "point run.output_dir at a bigger disk, or "
                      "set rollout.fp8=false", cfg.run.output_dir)


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
            yield Problem("rollout.router.port", f"the router cannot listen on {host}:{port} here: {exc.strerror}",
                          "choose a free port, or null to let rlrun pick one (check rollout.router.host too)", port)


# ---- the embedded Ray ----------------------------------------------------------------------------------------

def _visible(var_values: list[Optional[str]]) -> Optional[int]:
    """Devices a *_VISIBLE_DEVICES variable leaves (the first one set), as Ray counts them; None when none is set."""
    value = next((v for v in var_values if v is not None), None)
    if value is None:
        return None
    return len([d for d in value.split(",") if d.strip() and d.strip() != "-1"])


def _nvidia_gpus() -> int:
    """What Ray's NVIDIA accelerator manager finds: CUDA_VISIBLE_DEVICES, else the driver's GPUs
    (/proc/driver/nvidia/gpus holds one folder per GPU; no driver, no folder)."""
    seen = _visible([os.environ.get("CUDA_VISIBLE_DEVICES")])
    folder = Path("/proc/driver/nvidia/gpus")
    found = len(list(folder.iterdir())) if folder.is_dir() else 0
    return found if seen is None else min(seen, found)


def _amd_gpus() -> int:
    """What Ray's AMD accelerator manager finds: HIP/ROCR_VISIBLE_DEVICES, else the KFD topology's GPU nodes (a
    node with SIMD units; the CPU nodes have none)."""
    seen = _visible([os.environ.get("ROCR_VISIBLE_DEVICES"), os.environ.get("HIP_VISIBLE_DEVICES")])
    found = 0
    for props in Path("/sys/class/kfd/kfd/topology/nodes").glob("*/properties"):
        try:
            found += any(line.split()[:1] == ["simd_count"] and line.split()[1] != "0"
                         for line in props.read_text().splitlines())
        except (OSError, IndexError):
            continue
    return found if seen is None else min(seen, found)


GPU_COUNTERS: dict[str, Callable[[], int]] = {"cuda": _nvidia_gpus, "rocm": _amd_gpus}  # by hardware.vendor


def importable(module: str) -> bool:
    """Found by this Python's import system, without importing it (its parent packages are imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@check
def embedded_ray(cfg: RunConfig, plan: Any) -> Iterator[Problem]:
    """Without cluster.address, `rlrun run` starts a one-node Ray on this machine: the plan's GPUs must be here (as
    Ray will count them) and the engine's and the backend's Python modules importable (ENGINES / BACKENDS
    `requires`; those an engine argument or a train.megatron setting needs: args_requires, passthrough_requires);
    otherwise the run ended in a ResourceError or an ImportError after Ray started. A remote cluster
    is checked against its live nodes instead (rlrun.launch.cluster.check_resources)."""

    if cfg.cluster.address is not None or cfg.run.dry_run:  # a remote cluster, or no Ray at all (dry run)
        return
    if plan is None:
        plan = make_plan(cfg)
    demand, counter = plan.devices_per_node(), GPU_COUNTERS.get(cfg.hardware.vendor)
    if counter is not None:
        have = counter()
        if len(demand) > 1 or max(demand, default=0) > have:
            where = f"{len(demand)} nodes with {demand} GPUs" if len(demand) > 1 else f"{demand[0]} GPUs"
            yield Problem("hardware", f"the plan needs {where}; cluster.address is null, so the run would start Ray on "
                          f"this machine, which has {have} {cfg.hardware.vendor} GPU(s) (as Ray counts them: "
                          "*_VISIBLE_DEVICES, the driver)", "run on a machine that has them, set cluster.address to a "
                          "Ray cluster that does (or `rlrun submit`, docs/cluster.md), or a smaller plan "
                          "(train.gpus_per_node, rollout.num_gpus; `rlrun plan` shows the placement)",
                          cfg.hardware.name)
    for key, spec in (("rollout.engine", ENGINES[cfg.rollout.engine]), ("train.backend", BACKENDS[cfg.train.backend])):
        for module, install in spec.requires:
            if not importable(module):
                yield Problem(key, f"{key}={spec.name} needs the Python module {module}, which this Python "
                              f"({sys.executable}) cannot import", f"{install}, or choose another {key}", spec.name)
    # modules a setting makes the engine or the backend import (DeepEP for an MoE all-to-all): (key, value, module)
    engine, backend, needs = ENGINES[cfg.rollout.engine], BACKENDS[cfg.train.backend], []
    args = cfg.rollout.args_of()
    if engine.args_requires is not None and args:
        needs += [(f"rollout.{engine.args_key}.{k}", args[k], module, fix)
                  for k, module, fix in engine.args_requires(args)]
    if cfg.train.megatron and backend.passthrough_requires:
        needs += [(key, cfg.train.megatron[key.rsplit(".", 1)[1]], module, fix)
                  for key, module, fix in resolve(backend.passthrough_requires)(cfg)]
    for key, value, module, fix in needs:
        if not importable(module):
            shown = str(value).lower() if isinstance(value, bool) else value  # as YAML says it
            yield Problem(key, f"{key}={shown} needs the Python module {module}, which this Python "
                          f"({sys.executable}) cannot import", fix, value)


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
