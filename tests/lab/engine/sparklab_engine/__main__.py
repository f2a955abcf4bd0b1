"""`python -m sparklab_engine serve MODEL_DIR [vLLM-shaped flags]`: the lab's stand-in for
vLLM (LAB-ONLY test double, see README.md next to the package). Also
`python -m sparklab_engine hold BYTES`: a memory hog under the engine's name."""

import argparse
import sys
import threading

from sparklab_engine import __version__
from sparklab_engine.cli import UsageError, parse_bytes, parse_serve
from sparklab_engine.log import Log
from sparklab_engine.models.registry import get_supported_archs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="sparklab_engine", description="sparkctl lab stand-in engine (NOT vLLM)")
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", add_help=False, help="serve MODEL_DIR with an OpenAI-compatible API (vLLM-shaped flags)")
    hold = sub.add_parser("hold", help="hold BYTES of memory until killed (OOM-guard tests)")
    hold.add_argument("bytes", nargs="?", help="e.g. 4G (default: $SPARKLAB_ENGINE_HOLD_BYTES)")
    sub.add_parser("archs", help="list the architectures the registry knows")
    if argv[:1] == ["serve"]:
        from sparklab_engine.app import EngineServer

        try:
            settings = parse_serve(argv[1:])
        except UsageError as exc:
            print(f"sparklab_engine serve: error: {exc}", file=sys.stderr)
            return 2
        return EngineServer(settings, Log()).run()
    args = parser.parse_args(argv)
    if args.command == "archs":
        print("\n".join(get_supported_archs()))
        return 0
    if args.command == "hold":
        import os

        from sparklab_engine.app import hold_memory, set_comm

        try:
            total = parse_bytes(args.bytes or os.environ.get("SPARKLAB_ENGINE_HOLD_BYTES") or "0")
        except UsageError as exc:
            print(f"sparklab_engine hold: error: {exc}", file=sys.stderr)
            return 2
        set_comm(os.environ.get("SPARKLAB_ENGINE_COMM", "sparklab-engine"))
        held = []
        hold_memory(total, Log(), held)
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
