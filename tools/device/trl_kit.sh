#!/bin/bash
# Wheels for TRL 1.16.0 on the lent GPUs (bench/peer_grpo.py; tools/device/sglang.sh item `peer`), into .wT/ (git-ignored:
# add `/.wT/` to .git/info/exclude of the checkout). The device has Python 3.12, torch 2.11+cu130, transformers 5.17
# (the SGLang kit in .sgl/ pins transformers 5.12.1, dill 0.4.1) and no registry.
#   bash tools/device/trl_kit.sh        # from the repo root, on the dev machine (needs PyPI; ~1 min)
# .wT/ holds TRL and what it needs that the device may lack or have too old (read from the wheels' METADATA):
#   trl 1.16.0 -> accelerate, datasets, psutil (torch, transformers, numpy, pyyaml, jinja2, packaging: on the device)
#   datasets 5.2.0 -> pyarrow>=24, pandas, dill<0.4.2 (the kit's 0.4.1), multiprocess<0.70.20, xxhash,
#                     fsspec<=2026.9.0, huggingface-hub>=1.31,<3 (1.33.0 here: the kit's transformers 5.12.1 wants <2)
#                     (-> hf-xet>=1.6, click>=8.4.2: the device has hub 1.x for transformers, perhaps older)
#   pandas 3.1.1 -> python-dateutil (-> six)
# tools/device/stage.sh installs from .wT/ only what pip's resolver says is missing or too old on the device (a dry
# run against /tmp/site + the system packages), --no-deps into /tmp/site: nothing the device has is replaced needlessly.
# pyarrow (53 MB) is in .wP/ (its own folder: .wT + .wP pass the 64 MiB of a call): carry it, in a call of its own,
# only when stage.sh reports pyarrow missing (rlrun's rollout records import pyarrow, so a device that ran rlrun has
# it). stage.sh keeps both folders' wheels in $HOME/stage/trl while the machine stays warm.
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAT="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any --only-binary=:all:"
mkdir -p .wT .wP
python3 -m pip download -q --no-deps $PLAT -d .wT trl==1.16.0 accelerate==1.15.0 datasets==5.2.0 multiprocess==0.70.19 \
  xxhash==4.1.0 dill==0.4.1 fsspec==2026.9.0 huggingface_hub==1.33.0 hf-xet==1.8.0 click==8.5.1 pandas==3.1.1 \
  python-dateutil==2.9.0.post0 six==1.17.0 psutil==7.2.2
python3 -m pip download -q --no-deps $PLAT -d .wP pyarrow==26.0.1
du -sh .wT .wP; ls .wT .wP
# untracked folders travel with every device call: they must be git-ignored
for d in .wT .wP; do
  git check-ignore -q "$d" || echo "trl_kit.sh: $d is not git-ignored: add /$d/ to $(git rev-parse --git-common-dir)/info/exclude"
done
