"""Make the project's collection importable as ansible_collections.sparkctl.spark."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

# The wrapper package, importable without installing it.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
