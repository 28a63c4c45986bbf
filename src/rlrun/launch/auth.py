"""Ray's token authentication for the clients `rlrun submit | jobs | logs | stop` make (Jobs API and
state API, over the dashboard's HTTP port).

Ray 2.60 turns token auth on for `ray start --head` when a token is found on the head
(`maybe_enable_token_auth_if_token_available`, ray/_private/authentication/authentication_token_setup.py)
and for every new `ray.init()` cluster (`enable_token_auth_by_default`, which also writes
~/.ray/auth_token). Its HTTP clients send the token only when the *client* process runs with
RAY_AUTH_MODE=token (`get_auth_headers_if_auth_enabled`, ray/_private/authentication/
http_token_authentication.py), so a plain `rlrun submit` to such a cluster got a 401. rlrun reads the
token where Ray's own loader does (the order of ray.exceptions.AuthenticationError's help text):

    $RAY_AUTH_TOKEN, else the file $RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token

and sends it as `Authorization: Bearer <token>` (harmless to a cluster without auth: its middleware
passes every request through). A cluster that refuses the request (401: no token here; 403: a
different token) is a usage error with the fix, never a traceback.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
DOCS = "https://docs.ray.io/en/latest/ray-security/token-auth.html"


class ApiError(Exception):
    """The cluster refused a request: no or a wrong token, an unknown job id, ... (the CLI exits 2)."""


def token_source() -> tuple[str | None, str]:
    """(token, where it came from); token is None when none was found (where: what was searched)."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    path = Path(os.environ[TOKEN_PATH_ENV]) if os.environ.get(TOKEN_PATH_ENV) else Path.home() / ".ray" / "auth_token"
    try:
        token = path.read_text().strip()
    except OSError:
        token = ""
    searched = f"${TOKEN_ENV}, " + (f"${TOKEN_PATH_ENV}={path}" if os.environ.get(TOKEN_PATH_ENV) else str(path))
    return (token, str(path)) if token else (None, searched)


def join_in_token_mode(address: str) -> None:
    """A driver joining a cluster (cluster.address) sends the token only with RAY_AUTH_MODE=token, and Ray
    reads that setting when it is imported: so before `import ray`, when a token is found here and
    RAY_AUTH_MODE is not set, the driver is put in token mode (a cluster without auth ignores the token;
    RAY_AUTH_MODE set by the user is left as it is)."""
    token, where = token_source()
    if token and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = "token"
        print(f"[rlrun] joining {address} with Ray's token authentication (token from {where})", flush=True)


def headers() -> dict[str, str]:
    """The Authorization header for Ray's HTTP APIs, or {} when no token is found here."""
    token, _ = token_source()
    return {"Authorization": f"Bearer {token}"} if token else {}


def refusal(address: str, status: int) -> str:
    token, where = token_source()
    if status == 401 or token is None:
        return (f"the Ray cluster at {address} uses token authentication and no token was found here "
                f"(searched {where}). Fix: copy the head node's token (`ray get-auth-token` on the head prints it) "
                f"into ~/.ray/auth_token here, or set {TOKEN_ENV} (or {TOKEN_PATH_ENV}); see {DOCS}")
    return (f"the Ray cluster at {address} rejected the token from {where} (token authentication: a different "
            f"token). Fix: use the head node's token (`ray get-auth-token` on the head prints it); see {DOCS}")


@contextmanager
def ray_http_errors(address: str):
    """Ray's HTTP client errors as ApiError with one line and a fix: 401/403 (token auth), and the
    RuntimeError("Request failed with status code N: ...") the Jobs SDK raises for any other refusal
    (404: no such job)."""
    import aiohttp
    from ray.exceptions import AuthenticationError

    try:
        yield
    except AuthenticationError as e:
        raise ApiError(refusal(address, 403 if "failed" in e.message.lower() else 401)) from None
    except aiohttp.WSServerHandshakeError as e:  # tail_job_logs' websocket: no AuthenticationError there
        if e.status in (401, 403):
            raise ApiError(refusal(address, e.status)) from None
        raise ApiError(f"the Ray cluster at {address} refused to stream the logs: HTTP {e.status} {e.message}") from None
    except RuntimeError as e:
        msg = str(e)
        if not msg.startswith("Request failed with status code"):
            raise
        code = msg.split("status code", 1)[1].split(":", 1)[0].strip()
        body = msg.split(":", 1)[1].strip().rstrip(".").strip() if ":" in msg else ""
        hint = " (rlrun jobs lists the job ids)" if code == "404" else ""
        raise ApiError(f"the Ray cluster at {address} answered HTTP {code}: {body.splitlines()[0] if body else '?'}"
                       f"{hint}") from None
