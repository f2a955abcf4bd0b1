# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Python source registers and defines, read with the ast module and never imported:
an engine release's wheel (tools/engine_manifest.py) and a profile's own plugin source
(profile validation) are judged the same way, without torch, CUDA or the engine installed.

Parser registries, per engine:
  vLLM    ToolParserManager / ReasoningParserManager: register_module(...) and
          register_lazy_module(...) (as a call or a decorator; name= or the first argument,
          one name or a list) and the lazy name tables _TOOL_PARSERS_TO_REGISTER /
          _REASONING_PARSERS_TO_REGISTER.
  SGLang  FunctionCallParser.ToolCallParserEnum and ReasoningParser.DetectorMap: the dicts the
          server looks --tool-call-parser / --reasoning-parser up in, and items added to them.
A name computed at run time (a loop variable) comes from one of those tables, so it is not
needed."""

from __future__ import annotations

import ast

PARSER_KINDS = ("tool_call", "reasoning")
MANAGERS = {"ToolParserManager": "tool_call", "ReasoningParserManager": "reasoning"}
TABLES = {
    "_TOOL_PARSERS_TO_REGISTER": "tool_call",
    "ToolCallParserEnum": "tool_call",
    "_REASONING_PARSERS_TO_REGISTER": "reasoning",
    "DetectorMap": "reasoning",
}
# Cheap substring test before parsing a file: most of an engine's modules mention none.
NEEDLES = tuple(MANAGERS) + tuple(TABLES)


def mentions_a_registry(text):
    return any(needle in text for needle in NEEDLES)


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node):
    """A constant string, or a list/tuple of them, as a list; anything computed as []."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def registered_parsers(trees):
    """{"tool_call": set, "reasoning": set}: the parser names the parsed modules register."""
    found = {kind: set() for kind in PARSER_KINDS}
    for tree in trees:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("register_module", "register_lazy_module")
                    and _name(node.func.value) in MANAGERS):
                given = {kw.arg: kw.value for kw in node.keywords if kw.arg}
                target = given.get("name", node.args[0] if node.args else None)
                found[MANAGERS[_name(node.func.value)]].update(_strings(target) if target is not None else [])
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if _name(target) in TABLES and isinstance(node.value, ast.Dict):
                        found[TABLES[_name(target)]].update(_strings(ast.Tuple(elts=node.value.keys)))
                    elif (isinstance(target, ast.Subscript) and _name(target.value) in TABLES
                          and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
                        found[TABLES[_name(target.value)]].add(target.slice.value)
    return found


def top_level_names(tree):
    """Names a module defines at its top level: classes, functions, assignments and imports
    (a re-export `from .x import Cls` makes `module:Cls` loadable too)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names
