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

# The lab's fixture generators (tests/lab/node/roce_fixture.py) double as test helpers.
LAB_NODE = REPO / "tests" / "lab" / "node"
if str(LAB_NODE) not in sys.path:
    sys.path.insert(0, str(LAB_NODE))
