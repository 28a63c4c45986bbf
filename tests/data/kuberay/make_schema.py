"""Regenerate rayjob-v1.7.0.openapi.json.gz from KubeRay's released RayJob CRD.

    git -C KUBERAY show v1.7.0:ray-operator/config/crd/bases/ray.io_rayjobs.yaml > ray.io_rayjobs.yaml
    python tests/data/kuberay/make_schema.py ray.io_rayjobs.yaml

Keeps the ray.io/v1 version's openAPIV3Schema, drops the `description` texts (they are 90% of the
file and no part of validation) and writes compact, key-sorted JSON, gzipped (deterministic: mtime 0).
"""
import gzip
import json
import sys
from pathlib import Path

import yaml


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "description"}
    return [strip(v) for v in x] if isinstance(x, list) else x


crd = yaml.safe_load(Path(sys.argv[1]).read_text())
schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
text = json.dumps(strip(schema), sort_keys=True, separators=(",", ":")).encode()
out = Path(__file__).with_name("rayjob-v1.7.0.openapi.json.gz")
out.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
print(f"wrote {out} ({len(text)} bytes of JSON)")
