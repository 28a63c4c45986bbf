"""Router kinds (rollout.router.kind): the process in front of the engines that the data plane's requests go to.
protocol.py: the RolloutRouter protocol the fleet (rlrun.rollout.engines.group.EngineGroup) drives and the one way a
run builds its router (run_router). A router kind is one package (a pure spec.py registering its RouterKind, its
launcher beside it): routers/<kind>/, found by rlrun.config.kinds.discover(), or inside the package of the project
it comes from (sglang_router, SGLang's router: rlrun.rollout.engines.sglang.router, docs/rollout.md)."""
