"""sparkctl.bench: the streaming benchmark client of the verify-and-benchmark stage (issue 7).

`python -m sparkctl.bench run ...` measures TTFT, per-request decode rate and aggregate
throughput of an OpenAI-compatible endpoint and writes benchmark.json, benchmark.md and PNG
plots; `python -m sparkctl.bench selftest` prints the client's own parsing capacity.
Definitions and the overhead method: sparkctl/bench/README.md."""

# Bump when a key of benchmark.json changes meaning or disappears (additions keep the version).
SCHEMA_VERSION = 1
