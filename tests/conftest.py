import os
import tempfile

# config layer: keep rlrun's composition cache (rlrun/config/cache.py) out of the user's home during tests.
os.environ.setdefault("RLRUN_CACHE_DIR", tempfile.mkdtemp(prefix="rlrun-test-cache-"))
