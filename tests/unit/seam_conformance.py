"""Never run, only type-checked (tests/unit/test_seams.py runs mypy on it): the real parts, replay's stand-ins and
test_loop's doubles each satisfy their seam in rlrun.parts.seams. A method whose name or arity drifts from
the seam is a mypy error here."""
from rlrun.rollout.engines.hf.engine import RayEngine
from rlrun.launch.train_group import TrainGroup
from rlrun.parts.checkpoints import Checkpoints
from rlrun.parts.evaluator import Evaluator
from rlrun.parts.offload import Offload
from rlrun.parts.rollout_side import RolloutSide
from rlrun.parts.run_metrics import RunMetrics
from rlrun.rollout.engines.protocol import RolloutEngine
from rlrun.parts.seams import (CheckpointsPart, EvaluatorPart, MetricsPart, OffloadPart, RolloutPart,
                               TrainerPart, WeightSyncPart)
from rlrun.parts.weight_sync import WeightSync
from rlrun.replay import NoEngines, RecordedRollouts, ReplayCheckpoints
from rlrun.rollout.engines.group import HFEngineProcess
from rlrun.rollout.engines.sglang.engine import RaySGLangEngine, SGLangEngine
from test_loop import _Run, _Trainer

Seams = tuple[RolloutPart, TrainerPart, WeightSyncPart, OffloadPart, CheckpointsPart, EvaluatorPart, MetricsPart]


def real_parts(r: RolloutSide, t: TrainGroup, w: WeightSync, o: Offload, c: Checkpoints, e: Evaluator,
               m: RunMetrics) -> Seams:
    return r, t, w, o, c, e, m


def replay_parts(r: RecordedRollouts, t: TrainGroup, n: NoEngines, c: ReplayCheckpoints, m: RunMetrics) -> Seams:
    return r, t, n, n, c, n, m


def loop_doubles(run: _Run, t: _Trainer) -> Seams:
    return run, t, run, run, run, run, run


def engines(hf: RayEngine, sglang: RaySGLangEngine, server: SGLangEngine, local: HFEngineProcess
            ) -> tuple[RolloutEngine, ...]:
    return hf, sglang, server, local
