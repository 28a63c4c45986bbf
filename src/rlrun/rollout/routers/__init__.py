"""Router kinds (rollout.router.kind): the process in front of the engines that the data plane's requests go to.
protocol.py: the RolloutRouter protocol the fleet (rlrun.rollout.engines.group.EngineGroup) drives and the one way a
run builds its router (run_router); one package per kind (routers/<kind>/: a pure spec.py registering its
RouterKind, its launcher beside it), found by rlrun.config.kinds.discover()."""
