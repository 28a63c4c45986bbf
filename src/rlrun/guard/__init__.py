"""The gate during the run (docs/observability.md): run invariants checked every rollout
(rlrun.guard.invariants) and the stall watchdog with its diagnosis (rlrun.guard.watchdog)."""
