"""Hydra composition: overrides -> a plain, resolved dict (plus the group choices that produced it).

The conf/ tree lives at the top of the repository (found relative to this file); a user may add a
config dir of their own (its groups extend or shadow ours, e.g. conf/experiment/my-run.yaml). Hydra's
own errors (unknown key, unknown group option, bad override syntax) become Problems with a
did-you-mean, so that they are reported like every other config problem."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from rlrun.config import cache
from rlrun.config.errors import ConfigError, Problem, closest, did_you_mean
from rlrun.config.interpolate import interpolation_problem, resolve
from rlrun.config.schema import free_form_paths

# src/rlrun/config/compose.py -> repo root is three levels above the package directory (editable install,
# the supported setup); RLRUN_CONF_DIR points elsewhere, e.g. for a copy of conf/ next to a wheel install.
def _find_conf_dir() -> Path:
    """RLRUN_CONF_DIR, else a conf/ inside the package (the copy `rlrun submit` ships to a Ray job:
    rlrun.launch.jobs.ship), else the source checkout's conf/, else the copy a wheel install puts in
    {prefix}/share/rlrun/conf (pyproject's data-files)."""
    if os.environ.get("RLRUN_CONF_DIR"):
        return Path(os.environ["RLRUN_CONF_DIR"])
    shipped = Path(__file__).resolve().parents[1] / "conf"
    if (shipped / "config.yaml").is_file():
        return shipped
    source = Path(__file__).resolve().parents[3] / "conf"
    if (source / "config.yaml").is_file():
        return source
    import sys

    installed = Path(sys.prefix) / "share" / "rlrun" / "conf"
    return installed if (installed / "config.yaml").is_file() else source


CONF_DIR = _find_conf_dir()
PRIMARY = "config"
GROUPS = ("model", "algo", "hardware", "parallelism", "data", "experiment")


@dataclass(frozen=True)
class Composed:
    raw: dict[str, Any]          # resolved tree, before validation and derivation
    choices: dict[str, str | None]  # group -> option picked (e.g. {"model": "qwen3-4b", ...})
    overrides: tuple[str, ...]


def conf_dir() -> Path:
    if not (CONF_DIR / f"{PRIMARY}.yaml").is_file():
        raise ConfigError([Problem("", f"rlrun's config tree is missing: {CONF_DIR}/{PRIMARY}.yaml not found",
                                   "install rlrun from its source checkout (pip install -e .) or set "
                                   "RLRUN_CONF_DIR to a copy of its conf/ directory")])
    return CONF_DIR


def primary_default(dotted: str) -> Any:
    """The value at `dotted` in conf/config.yaml itself (before groups and overrides): the default a setting has
    when nobody set it, from the one place defaults live (e.g. to tell a setting the user changed from its default)."""
    node: Any = _primary_yaml()
    for part in dotted.split("."):
        node = node[part]
    return node


@lru_cache(maxsize=1)
def _primary_yaml() -> dict:
    """conf/config.yaml parsed, through the composition cache (a cached `rlrun plan` imports no yaml)."""
    path = conf_dir() / f"{PRIMARY}.yaml"
    k = cache.key(("<primary>",), [path.parent]) if cache.enabled() else None
    hit = cache.get(k) if k else None
    if hit is None:
        import yaml

        hit = {"tree": yaml.safe_load(path.read_text())}
        if k:
            cache.put(k, hit["tree"], {})
    return hit["tree"]


def _search_path_override(config_dir: str | os.PathLike | None) -> list[str]:
    if config_dir is None:
        return []
    d = Path(config_dir).resolve()
    if not d.is_dir():
        raise ConfigError([Problem("--config-dir", f"extra config dir {str(d)!r} does not exist",
                                   "pass an existing directory holding group folders such as experiment/")])
    return [f"hydra.searchpath=[file://{d}]"]


def _use_libyaml() -> None:
    """Hydra reads every YAML file with omegaconf.OmegaConf.load, which parses with the loader class
    omegaconf._utils.get_yaml_loader() returns: PyYAML's pure-Python SafeLoader plus omegaconf's float resolver, its
    duplicate-key check and no timestamps. Where PyYAML was built with libyaml, the same class over libyaml's C parser
    (yaml.cyaml.CParser: scanning, parsing and composing the node tree in C; tags resolved and values constructed by the same
    Python classes) reads conf/ ~3x faster (~30 ms of a composition; docs/benchmarks.md) into the same values
    (tests/unit/test_config_load.py compares the two on every file of conf/). Idempotent."""
    import yaml
    from omegaconf import _utils

    if not getattr(yaml, "__with_libyaml__", False) or getattr(_utils.get_yaml_loader, "libyaml", False):
        return
    from yaml.cyaml import CParser

    pure = _utils.get_yaml_loader()

    class LibyamlLoader(CParser, pure):  # type: ignore[misc,valid-type]  # CParser's methods win (MRO)
        def __init__(self, stream: Any):  # as yaml.CSafeLoader
            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    def get_yaml_loader() -> Any:
        return LibyamlLoader

    get_yaml_loader.libyaml = True  # type: ignore[attr-defined]
    get_yaml_loader.pure = pure  # type: ignore[attr-defined]  # the loader it stands for (tests compare them)
    _utils.get_yaml_loader = get_yaml_loader


class Composer:
    """Keeps one Hydra initialisation for many compositions (a sweep composes thousands of points)."""

    def __init__(self, config_dir: str | os.PathLike | None = None):
        from hydra import initialize_config_dir  # lazy: keeps `import rlrun.config` light
        from hydra.core.global_hydra import GlobalHydra

        _use_libyaml()
        self._extra = _search_path_override(config_dir)
        self._extra_dir = config_dir
        GlobalHydra.instance().clear()
        self._ctx = initialize_config_dir(config_dir=str(conf_dir()), version_base=None)
        self._ctx.__enter__()

    def close(self) -> None:
        self._ctx.__exit__(None, None, None)

    def __enter__(self) -> "Composer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def compose(self, overrides: Sequence[str]) -> Composed:
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        cfg, choices = self.compose_tree(overrides)
        try:
            raw = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError([interpolation_problem(e)]) from None
        return Composed(raw=raw, choices=choices, overrides=tuple(overrides))

    def compose_tree(self, overrides: Sequence[str]):
        """Hydra's composition, unresolved (a DictConfig without the hydra node), and the group choices."""
        from hydra import compose
        from hydra.errors import HydraException
        from omegaconf import open_dict
        from omegaconf.errors import OmegaConfBaseException

        import yaml

        # Hydra stops at the first bad override; drop it and retry so that all of them are reported at once.
        problems, todo = [], list(overrides)
        for o in [o for o in todo if o.lstrip("+~").startswith(("hydra.", "hydra/"))]:
            problems.append(hydra_key_problem(o))
            todo.remove(o)
        dropped = [o for o in overrides if o not in todo]
        while True:
            try:
                cfg = compose(PRIMARY, overrides=todo + self._extra, return_hydra_config=True)
                break
            except yaml.YAMLError as e:  # a broken YAML file: name the file and line
                mark = getattr(e, "problem_mark", None)
                where = f"{mark.name}:{mark.line + 1}" if mark else "a config file"
                detail = " ".join(str(getattr(e, "problem", None) or e).split())
                raise ConfigError(problems + [Problem(where, f"invalid YAML: {detail}",
                                                      f"fix the YAML syntax at {where}")]) from None
            except (HydraException, OmegaConfBaseException) as e:
                problem = self._problem_from_hydra(e, todo)
                problems.append(problem)
                culprit = _culprit(problem, todo)
                if culprit is None:
                    raise ComposeError(problems, dropped, complete=False) from None
                todo.remove(culprit)
                dropped.append(culprit)
        choices = {g: cfg.hydra.runtime.choices.get(g) for g in GROUPS}
        for g, option in choices.items():  # an optional group (experiment, parallelism) skips an unknown name
            if option is not None and option not in self.group_options(g):
                problems.append(self.unknown_option(g, option, overrides))
                dropped += [o for o in todo if o.lstrip("+").split("=", 1)[0] == g]
        if problems:
            raise ComposeError(problems, dropped, complete=True)
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg, choices

    def _problem_from_hydra(self, e: Exception, overrides: Sequence[str]) -> Problem:
        msg = str(e)
        m = re.search(r"Could not override '([^']+)'", msg)
        if m:  # a key that does not exist (Hydra's struct mode)
            path = m.group(1)
            parent, _, leaf = path.rpartition(".")
            keys = self._keys_at(parent, overrides)
            if leaf in keys:  # the key exists: its new value (a mapping) brings keys the section lacks
                return new_keys_problem(path, msg)
            return unknown_key(path, keys, self._paths(overrides))
        m = re.search(r"An item is already at '([^']+)'", msg)
        if m:
            return Problem(m.group(1), f"+{m.group(1)} adds a key, but {m.group(1)} is set already",
                           f"write {m.group(1)}=... to change it (or ++{m.group(1)}=... to add or change)", m.group(1))
        m = re.search(r"Could not delete from config\. (?:'([^']+)' does not exist|The value of '([^']+)')", msg)
        if m:
            path = m.group(1) or m.group(2)
            return Problem(path, f"~{path}: {msg.split('. ', 1)[1].strip()}", "check the key and value", path)
        m = re.search(r"Could not find '([^/']+)/([^']+)'", msg)
        if m:  # an unknown option of a config group
            return self.unknown_option(m.group(1), m.group(2), overrides)
        m = re.search(r"Could not find '([^']+)'", msg)
        if m:
            return Problem("", f"unknown config {m.group(1)!r}", "check the override's spelling", value=m.group(1))
        bad = _unparsable(overrides)
        if bad is not None:
            key = bad.lstrip("+~").split("=", 1)[0]
            return Problem(key, f"cannot parse the override {bad!r}", "quote values with special characters "
                           "(key='a b'), close brackets ([1,2]) and write key=value", value=bad)
        first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        return Problem("", f"cannot compose the config: {first}",
                       "check the override syntax: key=value, group=option, +new.key=value", value=list(overrides))

    def unknown_option(self, group: str, option: str, overrides: Sequence[str]) -> Problem:
        options = self.group_options(group)
        asked = any(o.lstrip("+~").split("=", 1)[0].split("@")[0] == group for o in overrides)
        exp = next((o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("experiment=")), None)
        origin = "" if asked else (f" (asked for by experiment/{exp}.yaml's defaults list)" if exp else
                                   " (asked for by a defaults list in conf/)")
        return Problem(group, f"unknown {group} {option!r}{did_you_mean(option, options)}{origin}",
                       f"pick one of: {', '.join(options)}", value=option)

    def _keys_at(self, parent: str, overrides: Sequence[str], node: bool = False):
        """Keys under `parent` in the default composition, for did-you-mean on unknown keys
        (node=True: the node itself, or None)."""
        from hydra import compose
        from omegaconf import OmegaConf

        safe = [o for o in overrides if "=" in o and o.split("=", 1)[0].lstrip("+~") in GROUPS]
        try:
            found = compose(PRIMARY, overrides=safe + self._extra)
            found = OmegaConf.select(found, parent) if parent else found
        except Exception:  # only a suggestion: never mask the real problem
            return None if node else []
        if node:
            return found if OmegaConf.is_dict(found) else None
        return list(found.keys()) if OmegaConf.is_dict(found) else []

    def _paths(self, overrides: Sequence[str]) -> list[str]:
        """Every dotted key of the default composition (for `tp=3` -> "did you mean parallelism.tp")."""
        from omegaconf import OmegaConf

        def walk(node, prefix):
            for k, v in node.items():
                path = f"{prefix}{k}"
                yield path
                if isinstance(v, dict):
                    yield from walk(v, path + ".")

        root = self._keys_at("", overrides, node=True)
        return list(walk(OmegaConf.to_container(root), "")) if root is not None else []

    def group_options(self, group: str) -> list[str]:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        # the loader's repository answers as its get_group_options does (which, with no primary config, reads no
        # search path of its own) without the deep copy of the whole repository that each of those calls makes
        repo = getattr(loader, "repository", None)
        options = set(repo.get_group_options(group) if repo is not None else loader.get_group_options(group))
        if self._extra_dir is not None:  # the search-path override reaches compose(), not this loader
            options |= {f.stem for f in (Path(self._extra_dir) / group).glob("*.yaml")}
        return sorted(options)


class ComposeError(ConfigError):
    """Hydra's problems plus what composing did about them: `dropped` are the overrides it had to leave
    out; `complete` says whether the rest composed (so that it can still be validated, see load)."""

    def __init__(self, problems, dropped: Sequence[str] = (), complete: bool = False):
        super().__init__(problems)
        self.dropped, self.complete = tuple(dropped), complete


def hydra_key_problem(override: str) -> Problem:
    """rlrun composes with Hydra's compose API and places run dirs itself (rundir.py, sweep.py), so
    Hydra's own job settings (hydra.run.dir, hydra.sweep.dir/subdir, hydra.job.*) would be ignored."""
    key, _, value = override.lstrip("+~").partition("=")
    fix = {"hydra.run.dir": "set run.output_dir (run dirs are {run.output_dir}/{run.name}/{timestamp}) and run.name",
           "hydra.sweep.dir": "set run.output_dir: a sweep writes {run.output_dir}/multirun/{timestamp}/{point index}/",
           "hydra.sweep.subdir": "a sweep names each point's dir by its index (the summary table maps index -> "
                                 "overrides); set run.output_dir to place them"}.get(key, "remove it; rlrun's own keys are "
                                                                            "listed by `rlrun --cfg job`")
    return Problem(key, f"{key} is a Hydra job setting, which rlrun does not use (it composes with Hydra's "
                        "compose API and places run dirs itself), so it would be silently ignored", fix, value)


def unknown_key(path: str, keys: Sequence[str], all_paths: Sequence[str] = ()) -> Problem:
    """An unknown key: the closest sibling, else a key of that name (or a close one) elsewhere in the
    tree (`tp=3` -> parallelism.tp)."""
    parent, _, leaf = path.rpartition(".")
    best = closest(leaf, keys)
    if best:
        best = ".".join(filter(None, [parent, best]))
    else:  # the same (or the closest) leaf name anywhere else
        leaves = {p.rpartition(".")[2] for p in all_paths}
        name = leaf if leaf in leaves else closest(leaf, leaves)
        same = [p for p in all_paths if name is not None and p.rpartition(".")[2] == name]
        best = same[0] if len(same) == 1 else None
        keys = same if len(same) > 1 else keys
    where = f" under {parent}" if parent else ""
    fix = (f"write {best}" if best else
           f"use one of the keys{where}: {', '.join(keys)}" if keys else "check the key's spelling")
    mean = f' (did you mean "{best}"?)' if best else ""

    return Problem(path, f"unknown key {leaf!r}{where}{mean}",
                   fix + " (`rlrun --cfg job` prints the whole tree; +key=value adds a key only under "
                   f"{' or '.join(free_form_paths())}, whose keys are free)", value=path)


def new_keys_problem(path: str, detail: str) -> Problem:
    m = re.search(r"Key '([^']+)' is not in struct", detail)
    extra = f" ({m.group(1)!r} is not in {path})" if m else ""

    fix = (f"add each new key with +{path}.<key>=value" if path in free_form_paths() else
           f"set {path}'s existing keys one by one ({path}.<key>=value; `rlrun --cfg job` lists them)")
    return Problem(path, f"the new value of {path} adds keys to a section with a fixed set of keys{extra}", fix,
                   value=path)


def _unparsable(overrides: Sequence[str]) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_override(o)
        except Exception:
            return o
    return None


def _culprit(problem: Problem, overrides: list[str]) -> str | None:
    """The override a Hydra problem came from (an unknown key or group option), if any."""
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key.split("@")[0] == problem.path and (problem.value in (key, value) or problem.path == key):
            return o
    return None


def compose(overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, *,
            use_cache: bool = True) -> Composed:
    """Compose with Hydra, or reuse the unresolved tree of an earlier identical composition (cache.py).
    use_cache=False: neither read nor write the cache (a throwaway config dir no later run can hit)."""

    overrides = tuple(overrides)
    dirs = [conf_dir()] + ([Path(config_dir).resolve()] if config_dir is not None else [])
    k = cache.key(overrides, dirs) if use_cache and cache.enabled() else None
    hit = cache.get(k) if k else None
    if hit is None:
        from omegaconf import OmegaConf

        with Composer(config_dir) as c:
            cfg, choices = c.compose_tree(overrides)
        hit = {"tree": OmegaConf.to_container(cfg, resolve=False), "choices": choices}
        if k:
            cache.put(k, hit["tree"], choices)
    return Composed(raw=resolve(hit["tree"]), choices=hit["choices"], overrides=overrides)
