"""sparkctl: bring DGX Sparks joined by a direct RoCE cable to a verified serving cluster.

Every command runs one or more stages, each a playbook in playbooks/ (of the checkout, or
of the installed sparkctl.spark collection: sparkctl/project.py), through ansible-runner.
The two-node lab is a development tool of the repository: tests/lab/sparklab.
Exit codes: 0 success, 1 play failure, 2 bad usage or inventory,
3 unreachable host."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import yaml

from . import __version__
from .events import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from .project import collection_importable, deployment_dir, project_dir, report_dir
from .report import REPORT_NAMES, report_path, show_preflight, show_report
from .history import short
from .result import StageResult, document, run_exit_code
from .rollback import RollbackError, rollback_vars
from .stages import StageError, plan

DEFAULT_INVENTORY = "inventories/spark"

COMMAND_HELP = {
    "up": "run every stage site.yml imports, in its order; stop at the first failure; re-run to repair drift",
    "doctor": "run only the preflight checks and print the report",
    "provision": "the direct cable, RoCE fabric environment, linger and SSH mesh",
    "serve": "start Ray and the engine services",
    "verify": "check the served model end to end",
    "bench": "run the benchmarks",
    "fabric-test": "measure every cable half between the head and each worker against a minimum",
    "stop": "stop the engine services",
    "teardown": "remove everything sparkctl put on the nodes (checkpoints stay unless --purge-checkpoints); "
                "--check lists it",
    "status": "show what runs where (read-only, fast)",
    "logs": "show the services' recent logs (read-only, fast)",
    "api-key": "print the API key kept on the head (shown only on request, never logged)",
    "rollback": "serve a recorded deployment again (default: the previous one) when its checkpoint and runtime "
                "are still on every node; refuses with the reason, before any change, otherwise",
}

# The variable playbooks/logs.yml reads for the number of lines (--node is a --limit).
LOGS_LINES_VAR = "logs_lines"
# The variable roles/teardown reads for --purge-checkpoints.
PURGE_CHECKPOINTS_VAR = "teardown_purge_checkpoints"
# Commands whose point is what their play prints: shown after the stage table.
PRINTING_COMMANDS = ("status", "logs", "fabric-test")


def _run_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every stage command takes. Accepted before and after the command
    (`sparkctl --json doctor` and `sparkctl doctor --json`): the subcommand's copy
    only sets what was given."""

    def default(value):
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("-i", "--inventory", default=default(DEFAULT_INVENTORY),
                        help=f"inventory directory or file (default: {DEFAULT_INVENTORY})")
    parser.add_argument("--profile", default=default(None), help="model profile to use (sets spark_model_profile)")
    parser.add_argument("--check", action="store_true", default=default(False),
                        help="dry run with diff: report what would change, change nothing")
    parser.add_argument("-t", "--tags", default=default(""), help="only tasks with these tags (comma separated)")
    parser.add_argument("--skip-tags", default=default(""), help="skip tasks with these tags (comma separated)")
    parser.add_argument("-l", "--limit", default=default(""), help="limit to these hosts (an Ansible pattern)")
    parser.add_argument("-e", "--extra-vars", action="append", default=default([]), metavar="VARS",
                        help="extra variables: key=value ..., a JSON/YAML mapping, or @file (repeatable)")
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print one JSON document for the run on stdout, no progress")
    parser.add_argument("-v", "--verbose", action="count", default=default(0),
                        help="more Ansible verbosity, and one line per task result (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkctl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sparkctl {__version__}")
    _run_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _run_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMAND_HELP.items():
        cmd = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        if name == "logs":
            cmd.add_argument("-n", "--lines", type=_positive_int, default=50, help="lines per service (default 50)")
            cmd.add_argument("--node", help="only this node")
        if name == "teardown":
            cmd.add_argument("--purge-checkpoints", action="store_true",
                             help="remove the checkpoint directories sparkctl created too")
        if name == "up":
            cmd.add_argument("--no-rollback", action="store_true",
                             help="when serve or verify fails after this run changed the deployment, leave the cluster "
                                  "as it is instead of returning to the last recorded deployment")
        if name == "rollback":
            cmd.add_argument("which", nargs="?", default=None, metavar="N",
                             help="the record to return to: its number in `sparkctl history` (1 = newest) or a "
                                  "deployment id prefix; default: the newest record of another deployment than "
                                  "the newest")
    rep = sub.add_parser("report", help="print the last reports (preflight, verify, benchmark, fabric-test)",
                         description="Print the last reports the stages wrote: preflight, verify, benchmark and "
                                     "fabric-test (default: each one present).")
    rep.add_argument("which", nargs="?", choices=REPORT_NAMES, help="only this report")
    rep.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the raw JSON")
    hist = sub.add_parser("history", help="list the deployments a passing verify recorded, newest first",
                          description="List the deployments a passing verify recorded on this control node for the "
                                      "inventory, newest first, numbered as `sparkctl rollback N` takes them: when, "
                                      "profile, runtime, checkpoint revision, verify status, sparkctl version "
                                      "($SPARKCTL_DEPLOYMENT_DIR, default .sparkctl/deployments, then one directory "
                                      "per inventory).")
    hist.add_argument("-i", "--inventory", default=argparse.SUPPRESS,
                      help=f"inventory directory or file (default: {DEFAULT_INVENTORY})")
    hist.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                      help="print the records as one JSON list, newest first")
    fit = sub.add_parser("fit", help="estimate whether a profile fits, from the checkpoint's headers and config",
                         description="Per profile (default: every shipped one): weights per rank from the checkpoint's "
                                     "safetensors headers (read from the hub, HF_ENDPOINT/HF_TOKEN, with two range "
                                     "requests per shard; or --checkpoint-dir), KV bytes per token from config.json, the "
                                     "tokens the KV pool buys, the longest context and the memory a node has left "
                                     "against the OOM guard line (docs/fit.md). Exit 1 when a profile does not fit.")
    fit.add_argument("--profile", action="append", default=[], help="a profile name (repeatable; default: every shipped one)")
    fit.add_argument("--profile-path", action="append", default=[], metavar="DIR",
                     help="a directory of your own profiles, searched before the shipped ones (repeatable)")
    fit.add_argument("--context", type=_positive_int, help="judge this context length instead of the profile's")
    fit.add_argument("--checkpoint-dir", metavar="DIR", help="read config.json and the shard headers from this directory")
    fit.add_argument("--mem-available-gib", type=float, metavar="GIB",
                     help="a node's MemAvailable before the engine (default: the profile's memory.node_budget_bytes)")
    fit.add_argument("--offline", action="store_true", help="do not ask the hub: weights from checkpoint.size_bytes")
    fit.add_argument("--kv-cache-dtype", metavar="DTYPE",
                     help="judge this KV cache dtype (auto, bfloat16, fp8, ...) instead of the profile's "
                          "engine.args.kv_cache_dtype")
    fit.add_argument("--kv-pool-gib", type=float, metavar="GIB",
                     help="judge this KV pool instead of the profile's memory.kv_pool_bytes")
    fit.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the estimates as JSON")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


class UsageError(Exception):
    """Bad input found after parsing: exit 2 with the message."""


def parse_extra_vars(values: list[str]) -> tuple[dict, list[str]]:
    """`-e` values as Ansible takes them: @file (kept as a file), a JSON/YAML mapping, or key=value pairs."""
    merged: dict = {}
    files: list[str] = []
    for value in values:
        text = value.strip()
        if text.startswith("@"):
            path = Path(text[1:]).expanduser()
            if not path.is_file():
                raise UsageError(f"-e {value}: no such file")
            files.append(str(path.resolve()))
        elif text.startswith(("{", "[")) or (":" in text and "=" not in text):
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise UsageError(f"-e {value!r} is not valid YAML/JSON: {exc}") from None
            if not isinstance(loaded, dict):
                raise UsageError(f"-e {value!r} is not a mapping")
            merged.update(loaded)
        else:
            for pair in shlex.split(text):
                key, sep, val = pair.partition("=")
                if not sep or not key:
                    raise UsageError(f"-e {value!r}: expected key=value, a mapping or @file")
                merged[key] = val
    return merged, files


def resolve_inventory(value: str, root: Path, cwd: Path | None = None) -> Path:
    """The inventory as given if it exists (relative to the working directory), else relative to the project."""
    path = Path(value).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = list(dict.fromkeys([(cwd or Path.cwd()) / path, root / path]))
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    raise UsageError(f"no inventory at {value} (looked in {', '.join(str(c) for c in candidates)})")


def run_options(args: argparse.Namespace, root: Path):
    """The command line as the runner's options; pure apart from resolving paths."""
    from .runner import RunOptions

    extravars, files = parse_extra_vars(args.extra_vars)
    if args.profile:
        extravars["spark_model_profile"] = args.profile
    limit = args.limit
    if args.command == "logs":
        extravars[LOGS_LINES_VAR] = args.lines
        if args.node:
            if limit:
                raise UsageError("logs: give --node or --limit, not both")
            limit = args.node
    if args.command == "teardown" and args.purge_checkpoints:
        extravars[PURGE_CHECKPOINTS_VAR] = True
    return RunOptions(inventory=resolve_inventory(args.inventory, root), extravars=extravars, extravar_files=files,
                      check=args.check, tags=args.tags, skip_tags=args.skip_tags, limit=with_control_node(limit),
                      verbosity=args.verbose)


def with_control_node(limit: str) -> str:
    """A --limit that keeps the control node: the inventory validation play runs there and cannot be skipped."""
    if not limit or "localhost" in limit.replace(":", ",").split(","):
        return limit
    return f"{limit},localhost"


def reports_written(root: Path, results: list[StageResult]) -> dict:
    """The JSON reports this run's stages wrote (preflight, later verify and benchmark), by name."""
    directory = report_dir(root).resolve()
    found = {}
    this_run_since = time.time() - sum(r.duration_s for r in results) - 5
    for result in results:
        if result.name == "benchmark" and result.status != "not_run":
            # Written by the benchmark client, not by a task: read where the stage puts it.
            path = report_path(report_dir(root), "benchmark")
            if path.is_file() and path.stat().st_mtime >= this_run_since:
                try:
                    found["benchmark"] = json.loads(path.read_text())
                except json.JSONDecodeError:
                    pass
        for name in result.files:
            path = Path(name)
            if path.suffix != ".json" or path.resolve().parent != directory or not path.is_file():
                continue
            try:
                found[path.stem] = json.loads(path.read_text())
            except json.JSONDecodeError:
                continue
    return found


def _consoles(as_json: bool):
    from rich.console import Console

    # Progress goes to stderr so stdout stays the summaries (or the one JSON document).
    return Console(), Console(stderr=True, quiet=as_json)


def run_stages(args: argparse.Namespace, root: Path) -> int:
    from .render import StageProgress, show_output, show_stage
    from .runner import run_stage

    out, err = _consoles(args.json)

    def finish(results: list[StageResult], code: int, error: str | None = None, inventory: str | None = None) -> int:
        if error:
            print(f"sparkctl: {error}", file=sys.stderr)
        if args.json:
            doc = document(args.command, inventory, results, code, reports=reports_written(root, results),
                           error=error, check=args.check, profile=args.profile)
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return code

    try:
        command_plan = plan(args.command, root)
    except StageError as exc:
        return finish([], EXIT_USAGE, str(exc))
    if args.command == "api-key":
        return run_api_key(args, root, command_plan)
    try:
        options = run_options(args, root)
        if args.command == "rollback":
            target = rollback_target(options.inventory, root, args.which)
            options.final_extravars = rollback_vars(target)
            err.print(f"returning to deployment {short(target.get('deployment_id'))} "
                      f"({(target.get('profile') or {}).get('name')}, recorded {target.get('recorded_at')})")
    except (UsageError, RollbackError) as exc:
        return finish([], EXIT_USAGE, str(exc))

    def run_and_show(stage, stage_options) -> StageResult:
        if args.json:
            result = run_stage(stage, stage_options, root)
        else:
            with StageProgress(stage.name, err, verbosity=args.verbose) as progress:
                result = run_stage(stage, stage_options, root, on_event=progress.on_event, on_status=progress.on_status)
            if args.command in PRINTING_COMMANDS:
                show_output(result, out)
            show_stage(result, out)
            _show_preflight_report(args.command, result, root, out)
            _show_verify_report(result, root, out)
        return result

    results: list[StageResult] = []
    for stage in command_plan.stages:
        if run_exit_code(results) != EXIT_OK:
            results.append(StageResult.not_run(stage.name, str(stage.playbook.relative_to(root))))
            continue
        results.append(run_and_show(stage, options))
    code = run_exit_code(results)
    may_roll_back = args.command == "up" and code != EXIT_OK and not args.check and not args.no_rollback
    verify_at = verify_after_failed_serve(command_plan.stages, results) if may_roll_back else None
    if verify_at is not None:
        # The served engine may be the run's new one, broken: verify judges the cluster and says
        # what the run deployed (verify.json's `intended`), which the rollback below needs.
        from rich.console import Console

        # On stderr even with --json, as the rollback's own notices.
        Console(stderr=True).print(f"{_first_failed(results).name} failed after the serve stage started: verifying "
                                   "the cluster to decide on a rollback")
        stage = command_plan.stages[verify_at]
        results[verify_at] = run_and_show(stage, dataclasses.replace(options, tags="", skip_tags=""))
    if not args.json and code != EXIT_OK:
        skipped = [r.name for r in results if r.status == "not_run"]
        if skipped:
            out.print(f"stopped: not run: {', '.join(skipped)}")
    message = None
    if may_roll_back:
        rolled, message = auto_rollback(args, root, options, results, out)
        if rolled is not None:
            results.append(rolled)
    return finish(results, code, message, inventory=str(options.inventory))


def rollback_target(inventory: Path, root: Path, which: str | None) -> dict:
    """The record `sparkctl rollback [WHICH]` returns to, from this inventory's history."""
    from .history import inventory_history, load_history
    from .rollback import select

    records, _ = load_history(inventory_history(deployment_dir(root), inventory))
    return select(records, which)


def _first_failed(results: list[StageResult]) -> StageResult | None:
    return next((r for r in results if r.exit_code not in (EXIT_OK, None)), None)


def verify_after_failed_serve(stages, results: list[StageResult]) -> int | None:
    """The index of the verify stage to run after `up` failed at serve or at a stage between
    serve and verify (the engine may have been switched, then failed): None when the run failed
    before serve (the stages before it install beside what serves and change nothing served),
    at verify itself, or when the plan has no serve or verify stage."""
    names = [stage.name for stage in stages]
    failed = _first_failed(results)
    if failed is None or "serve" not in names or "verify" not in names:
        return None
    serve_at, verify_at = names.index("serve"), names.index("verify")
    failed_at = names.index(failed.name) if failed.name in names else -1
    if not serve_at <= failed_at < verify_at or results[verify_at].status != "not_run":
        return None
    return verify_at


def auto_rollback(args: argparse.Namespace, root: Path, options, results: list[StageResult], out):
    """After `up` failed at verify, or at serve (or a stage after it) and then at the verify run
    after it (verify_after_failed_serve): when the run changed the deployment (verify.json's
    `intended` against the newest record), serve the newest record again (playbooks/rollback.yml),
    say so loudly, and keep the failed verify report as verify-failed.json. The run's exit code
    stays the failure's. Returns (the rollback stage's result or None, the run's error line or
    None); the notices go to stderr even with --json (the document's `error` says it too)."""
    import shutil

    from rich.console import Console

    from .history import inventory_history, load_history
    from .render import StageProgress, show_stage
    from .rollback import changed_deployment
    from .runner import run_stage
    from .stages import plan as stage_plan

    err = Console(stderr=True)
    failed = _first_failed(results)
    verified = next((r for r in results if r.name == "verify"), None)
    if failed is None or verified is None or verified.exit_code in (EXIT_OK, None):
        return None, None
    report = report_dir(root) / "verify.json"
    if reports_written(root, [verified]).get("verify") is None:
        return None, None
    records, _ = load_history(inventory_history(deployment_dir(root), options.inventory))
    target = changed_deployment(json.loads(report.read_text()), records)
    if target is None:
        return None, None
    name = short(target.get("deployment_id"))
    cause = "verify failed" if failed.name == "verify" else f"{failed.name} failed (the verify after it too)"
    try:
        extravars = rollback_vars(target)
    except RollbackError as exc:
        return None, f"{cause} after this run changed the deployment; no automatic rollback: {exc}"
    kept = report.with_name("verify-failed.json")
    shutil.copyfile(report, kept)
    err.print(f"[bold red]{cause} after this run changed the deployment: ROLLING BACK to deployment "
              f"{name} ({(target.get('profile') or {}).get('name')}, recorded "
              f"{target.get('recorded_at')}); the failed verify's report is {kept}[/]")
    stage = stage_plan("rollback", root).stages[0]
    rollback_options = dataclasses.replace(options, final_extravars=extravars, tags="", skip_tags="")
    if args.json:
        result = run_stage(stage, rollback_options, root)
    else:
        with StageProgress(stage.name, err, verbosity=args.verbose) as progress:
            result = run_stage(stage, rollback_options, root, on_event=progress.on_event,
                               on_status=progress.on_status)
        show_stage(result, out)
        _show_verify_report(result, root, out)
    if result.exit_code == EXIT_OK:
        message = (f"{cause} after this run changed the deployment (report: {kept}); ROLLED BACK: the cluster "
                   f"serves deployment {name} again")
    else:
        message = (f"{cause} after this run changed the deployment (report: {kept}); the automatic rollback "
                   f"to deployment {name} failed too: see its stage")
    return result, message


def _show_preflight_report(command: str, result: StageResult, root: Path, console) -> None:
    """The doctor's table: always for `doctor`, for `up` when preflight failed; only a report this run wrote."""
    if result.name != "preflight" or (command != "doctor" and result.exit_code == EXIT_OK):
        return
    path = report_dir(root) / "preflight.json"
    if reports_written(root, [result]).get("preflight") is not None:
        show_preflight(path, console)


def run_api_key(args: argparse.Namespace, root: Path, command_plan) -> int:
    """`sparkctl api-key`: the head's key on stdout and nothing else (KEY=$(sparkctl api-key)).
    The play copies it into a private file here (no_log); it is printed, then removed."""
    import tempfile

    from .runner import run_stage

    try:
        options = run_options(args, root)
    except UsageError as exc:
        print(f"sparkctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _, err = _consoles(False)
    with tempfile.TemporaryDirectory(prefix="sparkctl-key-") as private:
        key_path = Path(private) / "api-key"
        options.extravars["sparkctl_api_key_out"] = str(key_path)
        result = run_stage(command_plan.stages[0], options, root)
        code = run_exit_code([result])
        if code != EXIT_OK or not key_path.is_file():
            from .render import show_stage

            show_stage(result, _consoles(False)[1])
            err.print("sparkctl: could not read the API key (has the serve stage run?)")
            return code if code != EXIT_OK else EXIT_FAILED
        sys.stdout.write(key_path.read_text())
    return EXIT_OK


def _show_verify_report(result: StageResult, root: Path, console) -> None:
    """The verify stage's summary, whenever the stage wrote its report this run."""
    if result.name == "verify" and reports_written(root, [result]).get("verify") is not None:
        show_report(report_dir(root), "verify", console)


def run_report(args: argparse.Namespace, root: Path) -> int:
    """`sparkctl report [NAME]`: 0 when every report shown passed, 1 otherwise or when none exists."""
    directory = report_dir(root)
    names = [args.which] if args.which else [n for n in REPORT_NAMES if report_path(directory, n).is_file()]
    if getattr(args, "json", False):
        docs = {}
        for name in names:
            path = report_path(directory, name)
            docs[name] = json.loads(path.read_text()) if path.is_file() else None
        sys.stdout.write(json.dumps(docs if not args.which else docs[args.which] or {}, indent=2) + "\n")
        return 0
    if not names:
        print(f"sparkctl: no report in {directory}; run `sparkctl doctor` or `sparkctl up` first.", file=sys.stderr)
        return 1
    results = [show_report(directory, name) for name in names]
    return 0 if all(results) else 1


def run_history(args: argparse.Namespace, root: Path) -> int:
    """`sparkctl history`: 0 with at least one record, 1 with none (--json prints [] then)."""
    from .history import HISTORY_FILE_KEY, inventory_history, load_history, show_history

    try:
        directory = inventory_history(deployment_dir(root), resolve_inventory(args.inventory, root))
    except UsageError as exc:
        print(f"sparkctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "json", False):
        records, problems = load_history(directory)
        for line in problems:
            print(f"sparkctl: skipped {line}", file=sys.stderr)
        records = [{key: value for key, value in record.items() if key != HISTORY_FILE_KEY} for record in records]
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
        return 0 if records else 1
    return show_history(directory)


def run_fit(args: argparse.Namespace, root: Path) -> int:
    """`sparkctl fit`: 0 when every profile fits, 1 when one does not, 2 for a profile that cannot be loaded."""
    import os

    from .fit import fit_results, show_fit

    available = int(args.mem_available_gib * 1024**3) if args.mem_available_gib else None
    results, errors = fit_results(root, args.profile, paths=args.profile_path, context=args.context,
                                  checkpoint_dir=args.checkpoint_dir, offline=args.offline,
                                  node_available_bytes=available, endpoint=os.environ.get("HF_ENDPOINT") or None,
                                  token=os.environ.get("HF_TOKEN") or None, kv_cache_dtype=args.kv_cache_dtype,
                                  kv_pool_bytes=int(args.kv_pool_gib * 1024**3) if args.kv_pool_gib else None)
    for line in errors:
        print(f"sparkctl: {line}", file=sys.stderr)
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
    elif results:
        show_fit(results)
    if errors:
        return EXIT_USAGE
    return EXIT_OK if all(r["fits"] for r in results) else EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = project_dir()
    # The values the collection owns (the history's inventory key, the rollback's variables, the
    # fit's arithmetic) are read from its Python.
    collection_importable(root)
    if args.command == "report":
        return run_report(args, root)
    if args.command == "history":
        return run_history(args, root)
    if args.command == "fit":
        return run_fit(args, root)
    return run_stages(args, root)


if __name__ == "__main__":
    sys.exit(main())
