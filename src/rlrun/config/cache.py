"""A composition cache: `rlrun plan` with overrides it has composed before skips Hydra (and its ~0.2 s of
imports). Keyed by the overrides, the extra config dir and a fingerprint of every YAML file Hydra could
read (path, size, mtime) plus the rlrun/hydra versions, so editing conf/ invalidates it. It stores the
*unresolved* tree: interpolations (including resolvers such as ${oc.env:...}) are resolved on every use.
Off with RLRUN_NO_CACHE=1; lives in $RLRUN_CACHE_DIR or ~/.cache/rlrun."""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any, Optional, Sequence


def cache_dir() -> Path:
    return Path(os.environ.get("RLRUN_CACHE_DIR") or Path.home() / ".cache" / "rlrun") / "compose"


def enabled() -> bool:
    return os.environ.get("RLRUN_NO_CACHE", "") in ("", "0")


MAX_DEPTH = 3  # config.yaml, group/option.yaml, group/sub/option.yaml: deeper files are not config groups


def _fingerprint(dirs: Sequence[Path]) -> list:
    out = []
    for d in dirs:
        root = Path(d)
        for here, subdirs, files in os.walk(root):
            depth = len(Path(here).relative_to(root).parts)
            # prune hidden dirs (.venv, .git) and anything too deep to be a group: an extra config dir may
            # be a whole repository
            subdirs[:] = sorted(s for s in subdirs if not s.startswith(".") and depth < MAX_DEPTH - 1)
            for f in sorted(files):
                if f.endswith((".yaml", ".yml")):
                    st = (Path(here) / f).stat()
                    out.append([str(Path(here) / f), st.st_size, st.st_mtime_ns])
    return out


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


# Bump when compose() starts refusing something it used to accept (2: unknown optional-group names), so
# that an entry written by an older rlrun cannot let it through.
FORMAT = 2


def key(overrides: Sequence[str], dirs: Sequence[Path]) -> str:
    versions = [_version(p) for p in ("rlrun", "hydra-core", "omegaconf")] + [FORMAT]
    blob = json.dumps([list(overrides), [str(d) for d in dirs], _fingerprint(dirs), versions])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def get(k: str) -> Optional[dict[str, Any]]:
    f = cache_dir() / f"{k}.json"
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def put(k: str, tree: dict, choices: dict) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{k}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"tree": tree, "choices": choices}))
        tmp.replace(d / f"{k}.json")  # atomic: concurrent runs never read half a file
    except OSError:
        pass  # a cache is an optimisation: a read-only home must not break rlrun
