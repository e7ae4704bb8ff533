"""The public LDP libraries the benchmarks compare with, in the benchmarks' own venv.

They are never project dependencies: :func:`run_with_peers` re-runs the calling benchmark under
``/tmp/ldp-peers-venv`` (``LDP_PEERS_VENV``), creating it once with :data:`PEER_PACKAGES`, with the
repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS_VENV = Path(os.environ.get("LDP_PEERS_VENV", "/tmp/ldp-peers-venv"))
#: The peers, their undeclared dependencies (pure-LDP's hashing breaks with xxhash 4; importing
#: its frequency oracles needs scikit-learn, statsmodels and bitstring), and what importing the
#: repository needs.
PEER_PACKAGES = [
    "numpy",
    "scipy",
    "xxhash<4",
    "scikit-learn",
    "statsmodels",
    "bitstring",
    "multi-freq-ldpy",
    "pure-ldp",
    "requests",
]


def run_with_peers(script: str, modules: tuple[str, ...]) -> None:
    """Return if ``modules`` import here; else re-run ``script`` in the peers' venv (no return)."""
    try:
        for name in modules:
            importlib.import_module(name)
        return
    except ImportError:
        pass
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {PEERS_VENV} with {' '.join(PEER_PACKAGES)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    os.execve(str(python), [str(python), script, *sys.argv[1:]], env)
