"""One owner per value: a value the wrapper (sparkctl/) and the collection's Python (plugins/)
both need is written once, in its owner, and imported by everyone else, instead of written
twice and held equal by a test. This searches the Python sources for a second copy:

- REPRODUCE_VARS, the variables that reproduce a deployment (owner: module_utils/deployment.py),
  as a name assigned again or as a literal list of its names;
- the inventory key, the name of an inventory's history directory (owner: module_utils/deployment.py,
  inventory_key), as another `def inventory_key` or the sha256-of-the-real-path digest cut again;
- GUARD_BYTES, the OOM guard's line (owner: module_utils/fit.py), as a name assigned again or
  an 8 GiB literal;
- a cable address without its prefix length (owner: module_utils/link_address.py, bare_address,
  link_interface and link_subnet, on Python's ipaddress): netaddr imported anywhere, a prefix
  length written as a literal ("/24") to guess a subnet with, or an address's .ip cut off a
  freshly parsed interface outside the owner.

Strings in docstrings, messages and EXAMPLES are not code and are not searched: only assignments,
imports, function definitions, numbers and string constants that stand alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path("collections") / "ansible_collections" / "sparkctl" / "spark" / "plugins"
SOURCES = (Path("sparkctl"), PLUGINS)

DEPLOYMENT = PLUGINS / "module_utils" / "deployment.py"
FIT = PLUGINS / "module_utils" / "fit.py"
LINK_ADDRESS = PLUGINS / "module_utils" / "link_address.py"

GIB = 1024**3
GUARD = 8 * GIB
# Where an 8 GiB literal may stay outside its owner, and why (none: a module's DOCUMENTATION repeats its
# default as text, which this search does not read).
GUARD_LITERAL_KEPT: set[Path] = set()

# A prefix length alone, as a subnet guess is written: "/24", '/30'.
PREFIX_LITERAL = re.compile(r"^/\d{1,3}$")
# The inventory key's digest: the first 8 hex digits of a sha256.
KEY_DIGEST = re.compile(r"\.hexdigest\(\)\[:8\]")
# What parses an address with its prefix: a .ip taken off one of these is a bare address.
PARSERS = {"ip_interface", "IPv4Interface", "IPv6Interface", "IPNetwork", "IPAddress"}


def _reproduce_vars(repo: Path) -> tuple[str, ...]:
    """The owner's REPRODUCE_VARS, read from its source (no import: the tree searched may be another)."""
    for node in ast.walk(ast.parse((repo / DEPLOYMENT).read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "REPRODUCE_VARS"
                                                for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{DEPLOYMENT} no longer assigns REPRODUCE_VARS: update this test with its new owner")


def _number(node, names):
    """The value of an integer expression of literals and known names (GIB), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow)):
        left, right = _number(node.left, names), _number(node.right, names)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and right > 64):
            return None
        return left * right if isinstance(node.op, ast.Mult) else left**right
    return None


def _docstrings(tree):
    """The string constants that are docstrings (a module's, a class's or a function's)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _assigned_names(node):
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                yield name.id


def copies(repo: Path = REPO) -> list[str]:
    """Every second copy in repo's Python sources, one line each (path:line: what)."""
    reproduce = set(_reproduce_vars(repo))
    found = []
    for source in SOURCES:
        for path in sorted((repo / source).rglob("*.py")):
            rel = path.relative_to(repo)
            text = path.read_text()
            tree = ast.parse(text, str(rel))
            docstrings = _docstrings(tree)
            gib_names = {"GIB": GIB, "GiB": GIB}

            def say(node, what, rel=rel):
                found.append(f"{rel}:{getattr(node, 'lineno', '?')}: {what}")

            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for name in _assigned_names(node):
                        if name == "REPRODUCE_VARS" and rel != DEPLOYMENT:
                            say(node, f"REPRODUCE_VARS assigned again (owner: {DEPLOYMENT})")
                        if name == "GUARD_BYTES" and rel != FIT:
                            say(node, f"GUARD_BYTES assigned again (owner: {FIT})")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "inventory_key" \
                        and rel != DEPLOYMENT:
                    say(node, f"def inventory_key again (owner: {DEPLOYMENT})")
                elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and rel != DEPLOYMENT:
                    names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                    if reproduce <= names:
                        say(node, f"REPRODUCE_VARS' names written out again (owner: {DEPLOYMENT})")
                elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "netaddr" for a in node.names):
                    say(node, f"netaddr imported (addresses are read with ipaddress: {LINK_ADDRESS})")
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "netaddr":
                    say(node, f"netaddr imported (addresses are read with ipaddress: {LINK_ADDRESS})")
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                        and PREFIX_LITERAL.match(node.value) and rel != LINK_ADDRESS:
                    say(node, f"prefix length {node.value!r} written out (a cable half's subnet: "
                              f"{LINK_ADDRESS}, link_subnet)")
                elif isinstance(node, ast.Attribute) and node.attr == "ip" and isinstance(node.value, ast.Call) \
                        and rel != LINK_ADDRESS:
                    func = node.value.func
                    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if called in PARSERS:
                        say(node, f"an address's prefix cut off by hand (owner: {LINK_ADDRESS}, bare_address)")
                elif isinstance(node, (ast.Constant, ast.BinOp)) and rel != FIT and rel not in GUARD_LITERAL_KEPT \
                        and _number(node, gib_names) == GUARD:
                    say(node, f"the OOM guard's 8 GiB written out (owner: {FIT}, GUARD_BYTES)")
            if rel != DEPLOYMENT:
                for number, line in enumerate(text.splitlines(), 1):
                    if KEY_DIGEST.search(line):
                        found.append(f"{rel}:{number}: the inventory key's digest cut again (owner: {DEPLOYMENT})")
    return sorted(set(found))


def test_every_shared_value_has_one_owner():
    assert copies() == []


def test_the_owners_hold_the_values():
    """The search is anchored on the owners: each still defines what the others import."""
    deployment = (REPO / DEPLOYMENT).read_text()
    assert "def inventory_key(" in deployment and _reproduce_vars(REPO)
    assert re.search(r"^GUARD_BYTES = ", (REPO / FIT).read_text(), re.MULTILINE)
    link_address = (REPO / LINK_ADDRESS).read_text()
    assert "def bare_address(" in link_address and "def link_subnet(" in link_address


def test_the_search_finds_each_kind_of_copy(tmp_path):
    """Each rule fires on a copy of its kind (a tree of one wrapper file and the owners)."""
    for owner in (DEPLOYMENT, FIT, LINK_ADDRESS):
        (tmp_path / owner).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / owner).write_text((REPO / owner).read_text())
    names = ", ".join(repr(n) for n in _reproduce_vars(REPO))
    (tmp_path / "sparkctl").mkdir()
    (tmp_path / "sparkctl" / "copy.py").write_text(
        '"""A docstring may say /24 and 8589934592."""\n'
        "import hashlib\nimport ipaddress\nimport netaddr\nfrom netaddr import IPNetwork\n"
        "GIB = 1024**3\nGUARD_BYTES = 8 * GIB\n"
        f"REPRODUCE = ({names})\n"
        "def inventory_key(path):\n    return hashlib.sha256(path.encode()).hexdigest()[:8]\n"
        "def subnet(a, guard=8589934592):\n    return ipaddress.ip_interface(a + '/24').network\n"
        "def bare(a):\n    return str(ipaddress.ip_interface(a).ip)\n")
    found = "\n".join(copies(tmp_path))
    for what in ("GUARD_BYTES assigned again", "REPRODUCE_VARS' names written out again", "def inventory_key again",
                 "netaddr imported", "prefix length '/24' written out", "the OOM guard's 8 GiB written out",
                 "prefix cut off by hand", "the inventory key's digest cut again"):
        assert what in found, what
    assert "copy.py:1:" not in found
    assert len([line for line in found.splitlines() if "netaddr imported" in line]) == 2
    assert len([line for line in found.splitlines() if "8 GiB written out" in line]) == 2
