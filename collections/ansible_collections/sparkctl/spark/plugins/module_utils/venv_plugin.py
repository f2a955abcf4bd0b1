# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An engine's out-of-tree plugin installed into a venv's site-packages, the way the
Solar-Open2 plugin's install.sh does it (copy the plugin's files in-tree, keep an
`.orig` of every engine file it replaces), but idempotent and reversible:

- every file the plugin owns is listed (paths relative to site-packages) and read from
  a source tree that mirrors site-packages (`<src>/vllm/model_executor/models/x.py`);
- the first install of a file that the engine already has moves a byte-exact copy to
  `<file>.orig`; that backup is never overwritten afterwards (a later run, even after
  the engine was reinstalled, must not mistake the plugin's own file for the original);
- a manifest (JSON, in the venv) records each file's sha256 and its backup, so a
  converged re-run only hashes and a drifted file (edited by hand, or put back by a
  `pip install --force-reinstall` of the engine) is written again;
- `absent` restores every backup and removes the files the plugin added.

Pure stdlib; runs on the node with the Python Ansible uses there (not the venv's)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil

from ansible_collections.sparkctl.spark.plugins.module_utils.files import write_file_atomic
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import canonical_name, split_requirement

MANIFEST_NAME = ".sparkctl-plugin.json"
BACKUP_SUFFIX = ".orig"
MANIFEST_VERSION = 1
FILE_MODE = 0o644
# Rewritten by the engine_venv role whenever it changes what the venv holds (pins installed, the
# venv created again, the plugin installed or removed): every unit running the venv's code lists it
# as an input it read at start (profile_render.unit_inputs), so a unit older than the venv's last
# change restarts, on the run that changed it or on any later one.
CHANGE_MARKER = ".sparkctl-changed"


def change_marker(venv):
    """The venv's change marker: <venv>/.sparkctl-changed."""
    return os.path.join(str(venv), CHANGE_MARKER)


class PluginError(Exception):
    """Something the caller must fix; the message says what and how."""


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _safe_relative(rel):
    """A path inside site-packages: relative, normalised, no '..', no backup suffix."""
    if not isinstance(rel, str) or not rel:
        raise PluginError(f"plugin file {rel!r}: expected a path relative to site-packages.")
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm.startswith("..") or norm in (".", ""):
        raise PluginError(f"plugin file {rel!r}: must be a path inside site-packages "
                          "(relative, without '..'), e.g. vllm/model_executor/models/registry.py.")
    if norm.endswith(BACKUP_SUFFIX) or norm == MANIFEST_NAME:
        raise PluginError(f"plugin file {rel!r}: names ending in {BACKUP_SUFFIX} are the module's backups.")
    return norm


def find_site_packages(venv):
    """The venv's single lib/python3.X/site-packages directory."""
    if not os.path.isdir(venv):
        raise PluginError(f"venv {venv} does not exist: create it (and install the engine) before the plugin.")
    found = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    if len(found) != 1:
        raise PluginError(f"venv {venv}: expected one lib/python3.X/site-packages, found "
                          f"{', '.join(found) or 'none'}; pass site_packages explicitly.")
    return found[0]


def load_manifest(path):
    """The recorded install ({} when none). An unreadable manifest is an error, not a
    fresh install: guessing would take the plugin's own files for engine originals."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise PluginError(f"manifest {path} is unreadable ({exc}); restore it, or remove the plugin's files, "
                          "move each .orig back by hand and delete the manifest.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise PluginError(f"manifest {path} has no 'files' mapping; it was not written by sparkctl.")
    return data


def _atomic_copy(src, dest, mode=FILE_MODE):
    """Write dest from src through write_file_atomic (a temporary file in the same directory and
    a rename), so an engine starting meanwhile never imports half a file."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(src, "rb") as inp:
        write_file_atomic(dest, inp.read(), mode)
    _drop_bytecode(dest)


def _drop_bytecode(path):
    """Remove __pycache__/<stem>.*.pyc of a rewritten module. Python would notice the new
    mtime anyway; a restored backup keeps its old mtime, so do not rely on it."""
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext != ".py":
        return
    for pyc in glob.glob(os.path.join(os.path.dirname(path), "__pycache__", f"{stem}.*.pyc")):
        os.unlink(pyc)


def _render_manifest(data):
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _describe(files):
    """One line per file for a diff: path, content, backup."""
    lines = []
    for rel in sorted(files):
        entry = files[rel]
        if entry.get("sha256") is None:
            lines.append(f"{rel}: absent")
            continue
        origin = entry.get("origin", "")
        line = f"{rel}: sha256 {entry['sha256'][:16]} ({origin})"
        if entry.get("backup"):
            line += f", backup {entry['backup']}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def plan(src, site_packages, files, manifest, state="present", name=""):
    """What to do, without doing it: (actions, manifest_after, before, after).

    actions: list of {path, action, backup} with action in
    install (file absent, added), replace (engine file backed up then overwritten),
    repair (drifted from the plugin's content), restore (backup moved back), remove
    (an added file deleted), keep (already right)."""
    recorded = manifest.get("files", {}) if manifest else {}
    actions = []
    before, after = {}, {}
    new_files = {}

    def current(rel):
        dest = os.path.join(site_packages, rel)
        return sha256_file(dest) if os.path.isfile(dest) else None

    wanted = []
    if state == "present":
        wanted = [_safe_relative(rel) for rel in files]
        if len(set(wanted)) != len(wanted):
            raise PluginError("plugin files: a path is listed twice.")
        if not os.path.isdir(src):
            raise PluginError(f"plugin source {src} is not a directory on this node: copy the plugin there first "
                              "(its tree mirrors site-packages).")
        missing = [rel for rel in wanted if not os.path.isfile(os.path.join(src, rel))]
        if missing:
            raise PluginError(f"plugin source {src} lacks {', '.join(missing)}: the source tree must mirror "
                              "site-packages (each listed path at <source>/<path>); fix runtime.venv.plugin.source "
                              "or runtime.venv.plugin.replaces.")
        for rel in wanted:
            dest = os.path.join(site_packages, rel)
            backup_rel = rel + BACKUP_SUFFIX
            want = sha256_file(os.path.join(src, rel))
            have = current(rel)
            before[rel] = {"sha256": have, "origin": "plugin" if rel in recorded else "engine",
                           "backup": (recorded.get(rel) or {}).get("backup")}
            if rel in recorded:
                backup = recorded[rel].get("backup")
                action = "keep" if have == want else "repair"
            elif have is None:
                backup = None
                action = "install"
            else:
                # First install over an engine file: keep the original. An .orig already there
                # (a hand install with the plugin's own install.sh) is the older original: keep it.
                backup = backup_rel
                action = "replace" if have != want else "adopt"
            new_files[rel] = {"sha256": want, "backup": backup}
            after[rel] = {"sha256": want, "origin": "plugin", "backup": backup}
            actions.append({"path": rel, "action": action, "backup": backup,
                            "backup_exists": os.path.isfile(os.path.join(site_packages, backup_rel)),
                            "dest": dest})

    # Files recorded earlier but no longer wanted (the plugin shrank, or state=absent).
    for rel in sorted(set(recorded) - set(wanted)):
        entry = recorded[rel] or {}
        backup = entry.get("backup")
        have = current(rel)
        before[rel] = {"sha256": have, "origin": "plugin", "backup": backup}
        if backup:
            backup_path = os.path.join(site_packages, backup)
            if not os.path.isfile(backup_path):
                raise PluginError(f"cannot restore {rel}: its backup {backup_path} is missing; reinstall the engine "
                                  f"(pip install --force-reinstall) and delete {MANIFEST_NAME}.")
            after[rel] = {"sha256": sha256_file(backup_path), "origin": "engine", "backup": None}
            actions.append({"path": rel, "action": "restore", "backup": backup, "backup_exists": True,
                            "dest": os.path.join(site_packages, rel)})
        else:
            after[rel] = {"sha256": None}
            actions.append({"path": rel, "action": "remove" if have is not None else "keep", "backup": None,
                            "backup_exists": False, "dest": os.path.join(site_packages, rel)})

    manifest_after = None
    if state == "present":
        manifest_after = {"version": MANIFEST_VERSION, "name": name, "files": new_files}
    return actions, manifest_after, before, after


def apply(src, site_packages, actions):
    """Carry out plan()'s actions."""
    for act in actions:
        rel, dest = act["path"], act["dest"]
        kind = act["action"]
        if kind in ("replace", "adopt"):
            backup_path = os.path.join(site_packages, act["backup"])
            if not act["backup_exists"]:
                shutil.copy2(dest, backup_path)
            if kind == "replace":
                _atomic_copy(os.path.join(src, rel), dest)
        elif kind in ("install", "repair"):
            _atomic_copy(os.path.join(src, rel), dest)
        elif kind == "restore":
            backup_path = os.path.join(site_packages, act["backup"])
            _atomic_copy(backup_path, dest, mode=os.stat(backup_path).st_mode & 0o777)
            os.unlink(backup_path)
        elif kind == "remove":
            os.unlink(dest)
            _drop_bytecode(dest)


def run(venv, src=None, files=(), state="present", site_packages=None, manifest_path=None, name="",
        check_mode=False):
    """Install (state=present) or uninstall (state=absent) the plugin. Returns a dict
    {changed, actions, site_packages, manifest, diff}."""
    if state not in ("present", "absent"):
        raise PluginError(f"state {state!r}: expected present or absent.")
    manifest_path = manifest_path or os.path.join(venv, MANIFEST_NAME)
    if state == "absent" and not os.path.isdir(venv):
        # No venv, no plugin in it: already uninstalled.
        return {"changed": False, "actions": [], "site_packages": site_packages or "", "manifest": manifest_path,
                "diff": {"before": "", "after": ""}}
    site_packages = site_packages or find_site_packages(venv)
    manifest = load_manifest(manifest_path)
    if state == "present" and not files:
        raise PluginError("no plugin files listed: set runtime.venv.plugin.replaces (paths relative to site-packages).")
    actions, manifest_after, before, after = plan(src, site_packages, files, manifest, state, name)

    old_text = _render_manifest(manifest) if manifest else None
    new_text = _render_manifest(manifest_after) if manifest_after else None
    file_changes = [a for a in actions if a["action"] != "keep"]
    manifest_changes = old_text != new_text
    changed = bool(file_changes) or manifest_changes

    if changed and not check_mode:
        apply(src, site_packages, actions)
        if new_text is not None:
            write_file_atomic(manifest_path, new_text.encode("utf-8"), FILE_MODE)
        elif os.path.exists(manifest_path):
            os.unlink(manifest_path)

    return {
        "changed": changed,
        "actions": [{"path": a["path"], "action": a["action"], "backup": a["backup"]} for a in actions],
        "site_packages": site_packages,
        "manifest": manifest_path,
        "diff": {
            "before_header": f"{site_packages} (before)",
            "after_header": f"{site_packages} (after)",
            "before": _describe(before),
            "after": _describe(after),
        },
    }


# --------------------------------------------------------------------------------------------
# Checking that the engine in the venv knows the architecture
# --------------------------------------------------------------------------------------------

# How each engine lists the architectures it can run. vLLM:
# vllm.model_executor.models exports ModelRegistry (vllm/model_executor/models/registry.py);
# get_supported_archs() returns the keys of its models, out-of-tree registrations included.
# SGLang: sglang.srt.models.registry.ModelRegistry.get_supported_archs(). Verified in the lab
# only against the lab's stand-in engine; the real ones are golden-tested (the exact argv).
ENGINE_REGISTRIES = {
    "vllm": {"module": "vllm.model_executor.models", "attribute": "ModelRegistry.get_supported_archs"},
    "sglang": {"module": "sglang.srt.models.registry", "attribute": "ModelRegistry.get_supported_archs"},
}

# Runs with the venv's python: imports the engine's registry, calls the listing, checks the
# architecture, imports the plugin's module(s). Always prints one JSON object, exits 0.
PROBE_SCRIPT = """\
import importlib, json, sys, traceback
spec = json.loads(sys.argv[1])
result = {"ok": False, "architecture": spec["architecture"], "registered": False, "count": 0, "problems": []}
try:
    obj = importlib.import_module(spec["module"])
    for part in spec["attribute"].split("."):
        obj = getattr(obj, part)
    archs = set(obj() if callable(obj) else obj)
    result["count"] = len(archs)
    result["registered"] = spec["architecture"] in archs
    if not result["registered"]:
        result["problems"].append("%s is not among the %d architectures %s.%s lists"
                                  % (spec["architecture"], len(archs), spec["module"], spec["attribute"]))
except Exception:
    result["problems"].append("%s.%s: %s" % (spec["module"], spec["attribute"],
                                             traceback.format_exc().strip().splitlines()[-1]))
for name in spec.get("imports", []):
    try:
        importlib.import_module(name)
    except Exception:
        result["problems"].append("import %s: %s" % (name, traceback.format_exc().strip().splitlines()[-1]))
result["ok"] = not result["problems"]
print(json.dumps(result, sort_keys=True))
"""


def registry_for(engine_kind, override=None):
    """{module, attribute} that lists the engine's architectures: the profile's
    runtime.venv.registry if given, else the engine's default."""
    if override:
        return {"module": override["module"], "attribute": override["attribute"]}
    if engine_kind not in ENGINE_REGISTRIES:
        raise PluginError(f"engine {engine_kind!r} has no known registry; set runtime.venv.registry "
                          "{module, attribute} in the profile.")
    return dict(ENGINE_REGISTRIES[engine_kind])


def probe_argv(python, registry, architecture, imports=()):
    """argv that runs PROBE_SCRIPT with the venv's python."""
    spec = {"module": registry["module"], "attribute": registry["attribute"], "architecture": architecture,
            "imports": [m for m in imports if m]}
    return [python, "-c", PROBE_SCRIPT, json.dumps(spec, sort_keys=True)]


def probe_verdict(rc, stdout, stderr=""):
    """(ok, message) from the probe's output."""
    lines = [line for line in (stdout or "").splitlines() if line.strip().startswith("{")]
    if rc != 0 or not lines:
        return False, f"the probe did not run (rc={rc}): {(stderr or stdout or '').strip()[-600:]}"
    try:
        result = json.loads(lines[-1])
    except ValueError:
        return False, f"the probe printed no JSON: {stdout.strip()[-600:]}"
    if result.get("ok"):
        return True, f"{result['architecture']} is registered ({result.get('count', 0)} architectures)"
    return False, "; ".join(result.get("problems") or ["unknown problem"])


# --------------------------------------------------------------------------------------------
# Which pinned packages a venv lacks, and which Python the node has
# --------------------------------------------------------------------------------------------


def _satisfies(version, specifier):
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return Version(version) in SpecifierSet(specifier, prereleases=True)
        except InvalidVersion:
            pass
    except ImportError:
        pass
    return specifier.startswith("==") and specifier[2:].strip() == version


def missing_packages(packages, installed):
    """The specs of `packages` that `installed` (pip list --format=json: [{name, version}])
    does not satisfy. A direct reference (name @ url) counts as present when the name is."""
    have = {canonical_name(item["name"]): str(item["version"]) for item in installed or []}
    missing = []
    for spec in packages or []:
        name, specifier = split_requirement(spec)
        if name not in have or (specifier and not _satisfies(have[name], specifier)):
            missing.append(spec)
    return missing


# Runs with the node's python3: finds python<want> and the version of an existing venv.
PYTHON_PROBE_SCRIPT = """\
import json, os, shutil, subprocess, sys
want, venv = sys.argv[1], sys.argv[2]
result = {"system": list(sys.version_info[:3]), "requested": None, "venv": None}
def version(path):
    out = subprocess.run([path, "-c", "import sys, json; print(json.dumps(list(sys.version_info[:3])))"],
                         capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None
path = shutil.which("python" + want)
if path and version(path):
    result["requested"] = {"executable": path, "version": version(path)}
venv_python = os.path.join(venv, "bin", "python")
if os.path.exists(venv_python) or os.path.islink(venv_python):
    result["venv"] = {"version": version(venv_python) if os.path.exists(venv_python) else None}
print(json.dumps(result))
"""


def python_probe_argv(requested, venv, interpreter="python3"):
    """argv that runs PYTHON_PROBE_SCRIPT with the node's python3."""
    return [interpreter, "-c", PYTHON_PROBE_SCRIPT, str(requested), str(venv)]


def python_check(requested, probe, host=""):
    """{ok, executable, version, venv_package, message} for runtime.venv.python `requested`
    ("3" = the system python3, "3.12" = that minor) given PYTHON_PROBE_SCRIPT's output."""
    requested = str(requested)
    system = ".".join(str(v) for v in probe.get("system", [])[:2])
    found = probe.get("requested")
    where = f"{host}: " if host else ""
    if not found:
        return {"ok": False, "message": (
            f"{where}runtime.venv.python is {requested!r} but python{requested} is not installed (the system python3 "
            f"is {system}). Install it (Ubuntu 24.04: apt install python{requested} python{requested}-venv), or set "
            f"runtime.venv.python: \"3\" in the profile or spark_profile_overrides to use the system python3.")}
    version = found["version"]
    minor = f"{version[0]}.{version[1]}"
    if requested != "3" and minor != requested:
        return {"ok": False, "message": (
            f"{where}runtime.venv.python is {requested!r} but python{requested} reports {minor}; fix the node's "
            "python links or the profile.")}
    executable = found["executable"]
    # Debian/Ubuntu split venv (ensurepip) out of their Pythons: python3.X-venv.
    distro = executable.startswith(("/usr/bin/", "/bin/"))
    venv = probe.get("venv")
    venv_version = venv.get("version") if venv else None
    # A venv left by another Python (or whose interpreter vanished) is rebuilt, not patched.
    rebuild = bool(venv) and (not venv_version or f"{venv_version[0]}.{venv_version[1]}" != minor)
    return {"ok": True, "executable": executable, "version": minor, "rebuild_venv": rebuild,
            "venv_package": f"python{minor}-venv" if distro else None,
            "message": f"{where}python{requested} is {executable} ({'.'.join(str(v) for v in version)})"}


# --------------------------------------------------------------------------------------------
# Where the profile's local files come from (controller) and go to (node)
# --------------------------------------------------------------------------------------------


def _is_url(value):
    return "://" in str(value)


def local_sources(venv_spec, profile_dir, staging_dir):
    """The controller directories the role uploads, and how pip sees them on the node.

    Returns {find_links: [{controller, node}], plugin: {controller, node} | None}.
    A find_links entry that is a URL or an absolute path is used on the node as it is
    (controller None); a relative one is a directory beside the profile file, uploaded to
    <staging_dir>/find-links/<n>. The plugin source (relative to the profile file unless
    absolute) is always a controller directory, uploaded to <staging_dir>/plugin."""
    venv_spec = venv_spec or {}
    links = []
    for index, entry in enumerate(venv_spec.get("find_links") or []):
        entry = str(entry)
        if _is_url(entry) or os.path.isabs(entry):
            links.append({"controller": None, "node": entry})
        else:
            links.append({"controller": os.path.normpath(os.path.join(profile_dir, entry)),
                          "node": f"{staging_dir}/find-links/{index}"})
    plugin = None
    spec = venv_spec.get("plugin")
    if spec:
        source = os.path.expanduser(str(spec["source"]))
        if not os.path.isabs(source):
            source = os.path.normpath(os.path.join(profile_dir, source))
        plugin = {"controller": source, "node": f"{staging_dir}/plugin"}
    return {"find_links": links, "plugin": plugin}


def local_source_problems(sources, plugin_files=()):
    """Sentences naming each controller-side directory or plugin file that is missing."""
    problems = []
    for link in sources.get("find_links", []):
        if link["controller"] and not os.path.isdir(link["controller"]):
            problems.append(f"runtime.venv.find_links: {link['controller']} is not a directory on the control node "
                            "(relative entries are resolved against the profile file's directory).")
    plugin = sources.get("plugin")
    if plugin:
        if not os.path.isdir(plugin["controller"]):
            problems.append(f"runtime.venv.plugin.source: {plugin['controller']} is not a directory on the control node; "
                            "put the plugin beside the profile file (its tree mirrors site-packages) or point "
                            "runtime.venv.plugin.source at it (spark_profile_overrides).")
        else:
            for rel in plugin_files or []:
                if not os.path.isfile(os.path.join(plugin["controller"], rel)):
                    problems.append(f"runtime.venv.plugin.replaces: {rel} is not in {plugin['controller']} "
                                    "(the source tree must mirror site-packages).")
    return problems


def pip_extra_args(extra_index_urls, find_links, no_index=False):
    """pip's extra arguments for the profile's indexes and wheel locations (node side); with
    no_index, the wheel locations only (an offline wheelhouse: no package index is asked)."""
    args = ["--no-index"] if no_index else []
    for url in extra_index_urls or []:
        args += ["--extra-index-url", url]
    for link in find_links or []:
        args += ["--find-links", link]
    return " ".join(_shell_word(a) for a in args)


def _shell_word(word):
    import shlex

    return shlex.quote(str(word))
