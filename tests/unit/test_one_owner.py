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
imports, function definitions, numbers and string constants that stand alone.

Two values the playbooks read have an owner too, searched for in the YAML and the Jinja templates
(.j2) of roles/, playbooks/, site.yml and the collection's plugins/, and in the Python sources above
(head_copies, gcs_port_copies):

- the head's name (owner: roles/spark/defaults/main.yml, spark_cluster.head.name, pinned by
  roles/spark/tasks/validate.yml), as the head group's first member picked again in any spelling
  (groups['spark_head'][0], groups.spark_head[0], groups['spark_head'] | first, ...) in a YAML
  string, a template or a Python string constant other than a docstring (EXAMPLES included: a user
  copies them);
- Ray's GCS port (owner: plugin_utils/profile_schema.py, TOPOLOGY_PORTS, the profile's
  topology.ray_port, read as spark_topology_ports.ray_port), as the literal 6379 in a YAML value,
  a template or Python code. Comments, argument_specs descriptions and DOCUMENTATION, EXAMPLES and
  RETURN text may show it as an example value, and are not searched."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

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

# Where the playbooks' own YAML and templates live, and the collection's (plugins/ holds no YAML today).
PLAYBOOK_SOURCES = (Path("roles"), Path("playbooks"), Path("site.yml"), PLUGINS)
SPARK_DEFAULTS = Path("roles") / "spark" / "defaults" / "main.yml"
PROFILE_SCHEMA = PLUGINS / "plugin_utils" / "profile_schema.py"

# The head group's first member picked by hand: the group read as groups['spark_head'],
# groups["spark_head"], groups.spark_head or groups.get('spark_head', ...), perhaps in parentheses
# and through | default(...) or | list, then its first item taken with [0], .0 or | first.
HEAD_PICKED = re.compile(
    r"groups\s*(?:\[\s*['\"]spark_head['\"]\s*\]|\.spark_head\b|\.get\(\s*['\"]spark_head['\"][^)]*\))"
    r"(?:\s*\|\s*(?:default\([^)]*\)|list\b))*\s*\)?\s*(?:\[\s*0\s*\]|\.0(?!\d)|\|\s*first\b)")
# Ray's GCS port as a number of its own (not a part of a longer one).
GCS_PORT_LITERAL = re.compile(r"(?<!\d)6379(?!\d)")
# Module-level strings that document a plugin for ansible-doc: text, not values.
PLUGIN_DOC_STRINGS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
# In a role's meta/argument_specs.yml, the keys whose values describe an option rather than set it.
SPEC_TEXT_KEYS = {"description", "short_description"}
# A Jinja comment, and a line of a template that is a comment of the file it renders.
JINJA_COMMENT = re.compile(r"{#.*?#}", re.DOTALL)
TEMPLATE_COMMENT_LINE = re.compile(r"^[ \t]*#(?!!).*$", re.MULTILINE)


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


def _playbook_files(repo: Path, suffixes):
    for source in PLAYBOOK_SOURCES:
        root = repo / source
        paths = [root] if root.is_file() else sorted(root.rglob("*")) if root.is_dir() else []
        yield from (path for path in paths if path.is_file() and path.name.endswith(suffixes))


def _yaml_scalars(path: Path):
    """(line, text) of every scalar of a YAML file, keys and values, comments left out; in a role's
    meta/argument_specs.yml without the options' descriptions. Tags (!vault, !unsafe) are kept as text."""
    spec = path.name == "argument_specs.yml"

    def walk(node):
        if isinstance(node, yaml.ScalarNode):
            yield node.start_mark.line + 1, node.value
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                yield from walk(item)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                yield from walk(key)
                if not (spec and isinstance(key, yaml.ScalarNode) and key.value in SPEC_TEXT_KEYS):
                    yield from walk(value)

    for document in yaml.compose_all(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader):
        if document is not None:
            yield from walk(document)


def _template_text(path: Path) -> str:
    """A template without its comments (Jinja's and the rendered file's own), lines kept in place."""
    def blank(match):
        return "\n" * match.group(0).count("\n")

    return TEMPLATE_COMMENT_LINE.sub("", JINJA_COMMENT.sub(blank, path.read_text(encoding="utf-8")))


def _python_strings(repo: Path, path: Path):
    """(line, text, kind) of a Python file's string constants, kind 'doc' for docstrings and the
    plugin documentation (DOCUMENTATION, EXAMPLES, RETURN), 'examples' for EXAMPLES, else 'code'."""
    tree = ast.parse(path.read_text(), str(path.relative_to(repo)))
    docstrings = _docstrings(tree)
    documentation = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in PLUGIN_DOC_STRINGS
                                                for t in node.targets):
            name = next(t.id for t in node.targets if isinstance(t, ast.Name) and t.id in PLUGIN_DOC_STRINGS)
            for constant in ast.walk(node.value):
                documentation[id(constant)] = "examples" if name == "EXAMPLES" else "doc"
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            kind = "doc" if id(node) in docstrings else documentation.get(id(node), "code")
            yield node.lineno, node.value, kind
    yield from ((getattr(node, "lineno", 0), node, "number") for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and type(node.value) is int)


def _python_files(repo: Path):
    for source in SOURCES:
        yield from sorted((repo / source).rglob("*.py"))


def _at(line, text, match):
    """The line of a match in a multi-line string that starts on line."""
    return line + text[:match.start()].count("\n")


def _copies(repo: Path, what: str, pattern: re.Pattern, python_kinds: tuple[str, ...], number: int | None = None,
            owner: Path | None = None) -> list[str]:
    """Every match of pattern in the playbooks' YAML values and templates and in the Python strings of
    python_kinds, and every Python number equal to number, outside owner (path:line: what)."""
    found = []
    for path in _playbook_files(repo, (".yml", ".yaml")):
        rel = path.relative_to(repo)
        found += [f"{rel}:{line}: {what}" for line, text in _yaml_scalars(path) if pattern.search(text)]
    for path in _playbook_files(repo, (".j2",)):
        rel = path.relative_to(repo)
        text = _template_text(path)
        found += [f"{rel}:{_at(1, text, match)}: {what}" for match in pattern.finditer(text)]
    for path in _python_files(repo):
        rel = path.relative_to(repo)
        if rel == owner:
            continue
        for line, value, kind in _python_strings(repo, path):
            if kind == "number":
                if number is not None and value.value == number:
                    found.append(f"{rel}:{line}: {what}")
            elif kind in python_kinds:
                found += [f"{rel}:{_at(line, value, match)}: {what}" for match in pattern.finditer(value)]
    return sorted(set(found))


def head_copies(repo: Path = REPO) -> list[str]:
    """Every place the head's name is picked out of the spark_head group again (path:line: what)."""
    what = f"the head's name picked from the group again (owner: spark_cluster.head.name, {SPARK_DEFAULTS})"
    return _copies(repo, what, HEAD_PICKED, ("code", "examples"))


def gcs_port_copies(repo: Path = REPO) -> list[str]:
    """Every 6379 outside its owner, profile_schema.py, that is a value, not an example (path:line: what)."""
    what = f"Ray's GCS port written out (owner: topology.ray_port, {PROFILE_SCHEMA} TOPOLOGY_PORTS)"
    return _copies(repo, what, GCS_PORT_LITERAL, ("code",), number=6379, owner=PROFILE_SCHEMA)


def test_every_shared_value_has_one_owner():
    assert copies() == []


def test_the_head_is_named_by_its_owner_only():
    assert head_copies() == []


def test_rays_gcs_port_is_written_by_its_owner_only():
    assert gcs_port_copies() == []


def test_the_owners_hold_the_values():
    """The search is anchored on the owners: each still defines what the others import."""
    deployment = (REPO / DEPLOYMENT).read_text()
    assert "def inventory_key(" in deployment and _reproduce_vars(REPO)
    assert re.search(r"^GUARD_BYTES = ", (REPO / FIT).read_text(), re.MULTILINE)
    link_address = (REPO / LINK_ADDRESS).read_text()
    assert "def bare_address(" in link_address and "def link_subnet(" in link_address
    spark = yaml.safe_load((REPO / SPARK_DEFAULTS).read_text())
    assert "sparkctl.spark.profile_cluster" in spark["spark_cluster"]
    schema = ast.parse((REPO / PROFILE_SCHEMA).read_text())
    ports = next(ast.literal_eval(node.value) for node in schema.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "TOPOLOGY_PORTS" for t in node.targets))
    assert ports["ray_port"] == 6379


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


def test_the_head_and_port_searches_find_each_spelling(tmp_path):
    """Each spelling of the head's name and each kind of 6379 is found; comments, descriptions, docstrings and plugin
    documentation are not (a tree of one role, one plugin and the port's owner)."""
    role = tmp_path / "roles" / "r"
    for folder in ("vars", "meta", "templates"):
        (role / folder).mkdir(parents=True)
    (role / "vars" / "main.yml").write_text(
        "---\n"
        "# groups['spark_head'][0] and 6379 in a comment\n"
        "a: \"{{ groups['spark_head'][0] }}\"\n"
        "b: '{{ groups[\"spark_head\"] [ 0 ] }}'\n"
        "c: \"{{ groups.spark_head[0] }}\"\n"
        "d: \"{{ groups.spark_head.0 }}\"\n"
        "e: \"{{ groups['spark_head'] | first }}\"\n"
        "f: \"{{ groups.get('spark_head', []) | default([]) | first }}\"\n"
        "g: \"{{ (groups['spark_head'] | default([]))[0] }}\"\n"
        "h: >-\n  {{ hostvars[groups['spark_head'][0]].address }}:6379\n"
        "i: 6379\n"
        "j: \"{{ inventory_hostname in groups['spark_head'] }}\"\n"
        "k: 16379\n"
        "l: !unsafe '{{ groups.spark_head | list | first }}'\n")
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      x:\n"
        "        description: The head, groups['spark_head'][0], listens on 6379.\n"
        "        default: 6379\n")
    (role / "templates" / "t.j2").write_text(
        "{# 6379 on groups['spark_head'][0] #}\n"
        "# 6379: a comment of the rendered file\n"
        "address={{ address }}:6379\n"
        "head={{ groups.spark_head | first }}\n")
    plugin = tmp_path / PLUGINS / "filter" / "x.py"
    plugin.parent.mkdir(parents=True)
    plugin.write_text(
        '"""A docstring may say groups[\'spark_head\'][0] and 6379."""\n'
        'DOCUMENTATION = "port: 6379"\n'
        "EXAMPLES = \"head: '{{ groups[\\'spark_head\\'][0] }}:6379'\"\n"
        "PORT = 6379\n"
        'ADDRESS = "127.0.0.1:6379"\n'
        "HEAD = \"{{ groups['spark_head'][0] }}\"\n"
        "# 6379 in a comment\n")
    (tmp_path / PROFILE_SCHEMA).parent.mkdir(parents=True)
    (tmp_path / PROFILE_SCHEMA).write_text('TOPOLOGY_PORTS = {"ray_port": 6379}\n')
    (tmp_path / "sparkctl").mkdir()

    def lines(found):
        return sorted(line.split(": ")[0] for line in found)

    vars_ = "roles/r/vars/main.yml"
    assert lines(head_copies(tmp_path)) == sorted(
        [f"{vars_}:{n}" for n in (3, 4, 5, 6, 7, 8, 9, 10, 15)]
        + ["roles/r/templates/t.j2:4", f"{PLUGINS}/filter/x.py:3", f"{PLUGINS}/filter/x.py:6"])
    assert lines(gcs_port_copies(tmp_path)) == sorted(
        [f"{vars_}:10", f"{vars_}:12", "roles/r/meta/argument_specs.yml:6", "roles/r/templates/t.j2:3",
         f"{PLUGINS}/filter/x.py:4", f"{PLUGINS}/filter/x.py:5"])


# ----------------------------------------------------------------------------- role defaults copied elsewhere

# A fallback that says "unset" rather than repeating a value.
_NEUTRAL = (None, "", [], {})
# A `<variable> | default(<literal>)` in YAML or a template.
_YAML_DEFAULT = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(\s*('[^']*'|\"[^\"]*\"|true|false|True|False|-?\d+)\s*\)")


def _role_defaults(repo: Path) -> dict[str, tuple[str, object]]:
    """variable -> (owning role, its default) for every literal (not templated) role default."""
    found = {}
    for path in sorted((repo / "roles").glob("*/defaults/main.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if not (isinstance(value, str) and "{{" in value):
                found[name] = (path.parts[-3], value)
    return found


def _constants(tree: ast.Module) -> dict[str, object]:
    """A module's top-level NAME = constant assignments."""
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) for target in node.targets if isinstance(target, ast.Name)}


def _fallback_value(fallback, constants, module_constants):
    """What a `.get` fallback evaluates to: a literal, a module constant or another module's
    constant (link_address.X); _NEUTRAL for anything else."""
    try:
        return ast.literal_eval(fallback)
    except ValueError:
        if isinstance(fallback, ast.Name):
            return constants.get(fallback.id, _NEUTRAL)
        if isinstance(fallback, ast.Attribute) and isinstance(fallback.value, ast.Name):
            return module_constants.get(fallback.value.id, {}).get(fallback.attr, _NEUTRAL)
        return _NEUTRAL


def role_default_copies(repo: Path = REPO) -> list[str]:
    """A role default's value written again outside its role: as the fallback of a `.get` of the
    variable in the Python sources (literally or through a module constant), or as a
    `| default(...)` literal of the variable in another role's or a playbook's YAML (path:line: what)."""
    defaults = _role_defaults(repo)
    copies = []
    trees = {path: ast.parse(path.read_text()) for path in _python_files(repo)}
    module_constants = {path.stem: _constants(tree) for path, tree in trees.items()}
    for path, tree in trees.items():
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in defaults):
                continue
            name, fallback = node.args[0].value, node.args[1]
            value = _fallback_value(fallback, constants, module_constants)
            if value not in _NEUTRAL and value == defaults[name][1]:
                copies.append(f"{path.relative_to(repo)}:{node.lineno}: {name} falls back on "
                              f"{ast.unparse(fallback)}, the default of role {defaults[name][0]}")
    files = sorted([*(repo / "roles").rglob("*.yml"), *(repo / "roles").rglob("*.j2"), *(repo / "playbooks").glob("*.yml")])
    for path in files:
        rel = path.relative_to(repo)
        role = rel.parts[1] if rel.parts[0] == "roles" else None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for match in _YAML_DEFAULT.finditer(line):
                name = match.group(1)
                if name not in defaults or defaults[name][0] == role:
                    continue
                value = yaml.safe_load(match.group(2))
                if value not in _NEUTRAL and str(value) == str(defaults[name][1]):
                    copies.append(f"{rel}:{number}: {match.group(0)} repeats the default of role {defaults[name][0]}")
    return copies


def test_no_role_default_is_copied_outside_its_role():
    assert role_default_copies() == []


def test_the_role_default_search_finds_each_kind_of_copy(tmp_path):
    """The shapes the inventory validation, the preflight, sparkctl status and link_address held before
    they read the roles' defaults are found; the owner's own use, an empty fallback, another value, a
    templated default and a comment are not (a tree of two roles and two plugins)."""
    own = tmp_path / "roles" / "own"
    for folder in ("defaults", "tasks"):
        (own / folder).mkdir(parents=True)
    (own / "defaults" / "main.yml").write_text(
        "---\nown_mtu: 9000\nown_on: true\nown_name: ''\nown_path: \"{{ other }}/x\"\n")
    (own / "tasks" / "main.yml").write_text("---\n- x: \"{{ own_on | default(true) }}\"\n")
    (tmp_path / "roles" / "other" / "vars").mkdir(parents=True)
    (tmp_path / "roles" / "other" / "vars" / "main.yml").write_text(
        "---\n"
        "# own_on | default(true) in a comment\n"
        "a: \"{{ own_on | default(true) }}\"\n"
        "b: \"{{ own_on | default(false) }}\"\n"
        "c: \"{{ own_name | default('') }}\"\n")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "p.yml").write_text("---\n- x: \"{{ own_mtu | default(9000) }}\"\n")
    filters = tmp_path / PLUGINS / "filter"
    filters.mkdir(parents=True)
    (filters / "m.py").write_text("MTU = 9000\n")
    (filters / "x.py").write_text(
        "import m\n"
        "P = 9000\n"
        "a = v.get(\"own_mtu\", 9000)\n"
        "b = v.get(\"own_mtu\", P)\n"
        "c = v.get(\"own_mtu\", m.MTU)\n"
        "d = v.get(\"own_mtu\", 1500)\n"
        "e = v.get(\"own_name\", \"\")\n"
        "f = v.get(\"own_path\", \"/x\")\n")
    found = [line.split(": ", 1)[0] for line in role_default_copies(tmp_path)]
    x = f"{PLUGINS}/filter/x.py"
    assert found == [f"{x}:3", f"{x}:4", f"{x}:5", "playbooks/p.yml:2", "roles/other/vars/main.yml:3"]
