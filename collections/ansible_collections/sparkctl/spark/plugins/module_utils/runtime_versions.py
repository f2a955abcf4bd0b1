# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What must be identical on every node of a cluster: the driver, the CUDA version it
supports, the NCCL library the engine loads, torch, the engine's packages, and the
runtime itself (a hash of everything installed in the venv, or the image's id).

Tensor-parallel ranks exchange tensors through NCCL and run the same kernels; two nodes
that differ in any of these can hang in the first collective or diverge silently. The
parsers here are pure; gather_runtime_versions takes a command runner, like
gpu.gather_gpu_facts, so every branch is tested against recorded output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.sparkctl.spark.plugins.module_utils.engine_image import HASH_LABEL
from ansible_collections.sparkctl.spark.plugins.module_utils.requirement import canonical_name, distribution_name
from ansible_collections.sparkctl.spark.plugins.module_utils.gpu import (
    EXTRA_BIN_DIRS,
    first_output_line,
    gather_gpu_facts,
)

# The items version_parity compares, in the order of its table; packages follow as
# packages.<name>.
VERSION_ITEMS = ("driver", "cuda", "nccl", "torch", "python", "venv_lock_sha256", "image_id", "image_context_hash")

# Run by the venv's python with -I (no PYTHONPATH, no user site): every distribution the
# engine can import, once. Python >= 3.8; a dist-info without metadata is skipped.
VENV_PROBE_SCRIPT = (
    "import json, platform\n"
    "import importlib.metadata as md\n"
    "found = []\n"
    "for dist in md.distributions():\n"
    "    try:\n"
    "        meta = dist.metadata\n"
    "        name = meta.get('Name') if meta is not None else None\n"
    "        version = meta.get('Version') if meta is not None else None\n"
    "    except Exception:\n"
    "        continue\n"
    "    if name:\n"
    "        found.append([name, version])\n"
    "print(json.dumps({'python': platform.python_version(), 'distributions': found}))\n"
)

_NCCL_WHEEL_RE = re.compile(r"^nvidia-nccl-cu(\d+)$")
# libnccl.so.2 is a symlink to libnccl.so.2.30.7: the target's name is the version that runs.
_NCCL_FILE_VERSION_RE = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")


def venv_python(venv_path):
    return os.path.join(venv_path, "bin", "python")


def venv_probe_argv(python):
    return [python, "-I", "-c", VENV_PROBE_SCRIPT]


def parse_venv_probe(text):
    """{'python': '3.12.3', 'distributions': [[name, version], ...]} from the probe's output.

    Raises ValueError when the output is not the probe's JSON (a wrapper printed something,
    or the interpreter is not Python 3.8+)."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                break
            if isinstance(data, dict) and isinstance(data.get("distributions"), list):
                dists = [[str(d[0]), None if d[1] is None else str(d[1])] for d in data["distributions"]
                         if isinstance(d, (list, tuple)) and len(d) == 2 and d[0]]
                return {"python": data.get("python"), "distributions": dists}
            break
    raise ValueError("the venv's python printed no distribution list: %s" % (first_output_line(text, "") or "no output"))


def lock_lines(distributions):
    """Sorted, de-duplicated 'name==version' lines, names normalized (PEP 503)."""
    return sorted(set("%s==%s" % (canonical_name(name), version or "") for name, version in distributions))


def lock_sha256(distributions):
    """sha256 of lock_lines, one per line: equal on two nodes exactly when the same versions
    of the same distributions are installed."""
    return hashlib.sha256("".join(line + "\n" for line in lock_lines(distributions)).encode("utf-8")).hexdigest()


def distribution_version(distributions, name):
    """The version of the first distribution called name (as on sys.path: the one Python
    imports), or None."""
    wanted = canonical_name(name)
    for dist_name, version in distributions:
        if canonical_name(dist_name) == wanted:
            return version
    return None


def nccl_wheel(distributions):
    """(version, wheel name) of the NCCL wheel torch loads (nvidia-nccl-cu12 / -cu13), the
    highest CUDA major when several are installed; (None, None) without one."""
    wheels = []
    for name, version in distributions:
        match = _NCCL_WHEEL_RE.match(canonical_name(name))
        if match:
            wheels.append((int(match.group(1)), canonical_name(name), version))
    if not wheels:
        return None, None
    wheels.sort()
    return wheels[-1][2], wheels[-1][1]


def parse_image_inspect(text):
    """{'id', 'context_hash'} from `docker image inspect IMAGE` (a JSON list of one object).
    context_hash is sparkctl's build label, None for images it did not build."""
    data = json.loads(text)
    if isinstance(data, list):
        data = data[0] if data else {}
    if not isinstance(data, dict) or not data.get("Id"):
        raise ValueError("docker image inspect printed no image id")
    labels = (data.get("Config") or {}).get("Labels") or {}
    return {"id": data["Id"], "context_hash": labels.get(HASH_LABEL)}


def nccl_file_version(path, realpath=os.path.realpath):
    """'2.30.7' when path resolves to libnccl.so.2.30.7, else None."""
    match = _NCCL_FILE_VERSION_RE.search(os.path.basename(realpath(path)))
    return match.group(1) if match else None


def preload_facts(preload, exists=os.path.exists, realpath=os.path.realpath):
    """{path, version (declared), exists, file_version} of nccl.preload, None without one."""
    path = (preload or {}).get("path")
    if not path:
        return None
    present = bool(exists(path))
    return {
        "path": path,
        "version": None if (preload or {}).get("version") is None else str(preload["version"]),
        "exists": present,
        "file_version": nccl_file_version(path, realpath) if present else None,
    }


def empty_versions(package_names=()):
    versions = dict((item, None) for item in VERSION_ITEMS)
    versions["nccl_source"] = "none"
    versions["packages"] = dict((name, None) for name in package_names)
    return versions


def gather_runtime_versions(run_command, runtime_kind, nvidia_smi_path, venv_path=None, packages=(),
                            docker_path=None, image=None, nccl_preload=None, image_nccl_version=None,
                            image_container=None, exists=os.path.exists, realpath=os.path.realpath):
    """{'versions', 'problems', 'nccl_preload'} of this node.

    run_command(argv) -> (rc, stdout, stderr). nvidia_smi_path / docker_path are the resolved
    executables or None. Nothing raises for a missing tool, venv or image: each becomes a line
    of 'problems' and the values it would have given stay None, so the parity table shows the
    gap next to the other nodes' values."""
    names = []
    for spec in packages or ():
        name = distribution_name(spec)
        if name and name not in names:
            names.append(name)
    versions = empty_versions(names)
    problems = []

    gpu = gather_gpu_facts(run_command, nvidia_smi_path, None)
    versions["driver"] = gpu["driver_version"]
    versions["cuda"] = gpu["cuda_driver_version"]
    if gpu["error"]:
        problems.append("nvidia-smi: %s" % gpu["error"])

    pip_nccl = None
    if runtime_kind == "venv":
        pip_nccl = _gather_venv(run_command, venv_path, names, versions, problems, exists)
    elif runtime_kind == "image":
        _gather_image(run_command, docker_path, image, versions, problems)
        if image_container and docker_path:
            _gather_container(run_command, docker_path, image_container, names, versions, problems)
    else:
        raise ValueError("runtime_kind must be venv or image, got %r" % (runtime_kind,))

    preload = preload_facts(nccl_preload, exists, realpath)
    fallback, fallback_source = (pip_nccl, "venv") if runtime_kind == "venv" else (image_nccl_version, "image")
    if preload and preload["exists"]:
        # LD_PRELOAD (fabric.env) loads this library before torch's own: it is the NCCL that runs.
        versions["nccl"] = preload["file_version"] or preload["version"]
        versions["nccl_source"] = "preload"
        if preload["file_version"] and preload["version"] and preload["file_version"] != preload["version"]:
            problems.append("NCCL preload %s is %s, the profile says %s" % (
                preload["path"], preload["file_version"], preload["version"]))
    else:
        if preload:
            problems.append("NCCL preload %s does not exist: the dynamic loader skips it and the engine runs %s" % (
                preload["path"], "NCCL %s from the %s" % (fallback, runtime_kind) if fallback else "the runtime's own NCCL"))
        if fallback:
            versions["nccl"] = str(fallback)
            versions["nccl_source"] = fallback_source
    return {"versions": versions, "problems": problems, "nccl_preload": preload}


def _gather_venv(run_command, venv_path, names, versions, problems, exists):
    """Fill the venv's items; return the version of its NCCL wheel."""
    python = venv_python(venv_path)
    if not exists(python):
        problems.append("venv %s has no bin/python" % venv_path)
        return None
    rc, out, err = run_command(venv_probe_argv(python))
    if rc != 0:
        # A traceback ends with the line that says what went wrong.
        last = [line.strip() for line in (err or "").splitlines() if line.strip()]
        problems.append("%s failed: %s" % (python, last[-1] if last else first_output_line(out, err) or "exit code %d" % rc))
        return None
    try:
        probe = parse_venv_probe(out)
    except ValueError as exc:
        problems.append("%s: %s" % (python, exc))
        return None
    dists = probe["distributions"]
    versions["python"] = probe["python"]
    versions["torch"] = distribution_version(dists, "torch")
    versions["venv_lock_sha256"] = lock_sha256(dists)
    for name in names:
        versions["packages"][name] = distribution_version(dists, name)
    version, wheel = nccl_wheel(dists)
    wheels = sorted(set(canonical_name(n) for n, _v in dists if _NCCL_WHEEL_RE.match(canonical_name(n))))
    if len(wheels) > 1:
        problems.append("several NCCL wheels in %s (%s): torch loads one, counted here as %s" % (
            venv_path, ", ".join(wheels), wheel))
    return version


def _parsed_output(run_command, argv, label, parse, problems):
    """parse(stdout) of argv; None, with a line in problems naming label and why, when the
    command fails or prints something parse refuses."""
    rc, out, err = run_command(argv)
    if rc != 0:
        problems.append("%s: %s" % (label, first_output_line(out, err) or "exit code %d" % rc))
        return None
    try:
        return parse(out)
    except ValueError as exc:
        problems.append("%s: %s" % (label, exc))
        return None


def _gather_image(run_command, docker_path, image, versions, problems):
    if not docker_path:
        problems.append("docker not found")
        return
    inspected = _parsed_output(run_command, [docker_path, "image", "inspect", image], "docker image inspect %s" % image,
                               parse_image_inspect, problems)
    if inspected is None:
        return
    versions["image_id"] = inspected["id"]
    versions["image_context_hash"] = inspected["context_hash"]


def _gather_container(run_command, docker_path, container, names, versions, problems):
    """Python, torch and the packages as the image's own Python reports them inside the
    engine's running container: an image names no versions of its own (a pulled NGC or fork
    image says nothing of the vLLM it carries), so they are read where the engine runs."""
    probe = _parsed_output(run_command, [docker_path, "exec", container, "python3", "-I", "-c", VENV_PROBE_SCRIPT],
                           "docker exec %s" % container, parse_venv_probe, problems)
    if probe is None:
        return
    dists = probe["distributions"]
    versions["python"] = probe["python"]
    versions["torch"] = distribution_version(dists, "torch")
    for name in names:
        versions["packages"][name] = distribution_version(dists, name)


# The options read_runtime_versions takes, as runtime_versions and verify_facts declare them.
RUNTIME_ARGUMENT_SPEC = dict(
    runtime_kind=dict(type="str", required=True, choices=["venv", "image"]),
    venv_path=dict(type="path"),
    packages=dict(type="list", elements="str", default=[]),
    image=dict(type="str"),
    image_nccl_version=dict(type="str"),
    image_container=dict(type="str"),
    nccl_preload=dict(type="dict", options=dict(version=dict(type="str"), path=dict(type="str"))),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    docker=dict(type="str", default="docker"),
)
RUNTIME_REQUIRED_IF = [("runtime_kind", "venv", ["venv_path"]), ("runtime_kind", "image", ["image"])]


def read_runtime_versions(module, runtime_kind, venv_path=None, packages=(), image=None, nccl_preload=None,
                          image_nccl_version=None, image_container=None, nvidia_smi="nvidia-smi", docker="docker"):
    """gather_runtime_versions as an AnsibleModule runs it (the executables found in PATH and
    EXTRA_BIN_DIRS): runtime_versions' and verify_facts' one reader."""
    def run_command(argv):
        return module.run_command(argv, check_rc=False)

    docker_path = module.get_bin_path(docker, opt_dirs=list(EXTRA_BIN_DIRS)) if runtime_kind == "image" else None
    return gather_runtime_versions(
        run_command,
        runtime_kind,
        module.get_bin_path(nvidia_smi, opt_dirs=list(EXTRA_BIN_DIRS)),
        venv_path=venv_path,
        packages=packages,
        docker_path=docker_path,
        image=image,
        nccl_preload=nccl_preload,
        image_nccl_version=image_nccl_version,
        image_container=image_container,
    )
