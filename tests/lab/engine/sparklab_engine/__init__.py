"""sparklab_engine: the lab's stand-in for an inference engine (LAB-ONLY test double, not vLLM).

`python -m sparklab_engine serve MODEL_DIR [vLLM-shaped flags]` serves an OpenAI-compatible
API with deterministic answers and a configurable timing model, and prints the startup lines
sparkctl's verify stage reads (README.md next to this package). It also has the one piece of
vLLM's layout the venv runtime touches: a model registry in sparklab_engine/models/registry.py
that an out-of-tree plugin replaces to register its architecture (tests/lab/plugins/sparklab_plugin)."""

__version__ = "0.3.0"
# A defect a release may carry, written per wheel by _build/sparklab_build.py: "" (none) or
# "crash-during-boot" (every boot dies after loading, as an engine release with a boot
# regression does): the lab's broken runtime upgrade is a pin bump to such a release.
RELEASE_DEFECT = ""
