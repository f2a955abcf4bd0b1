# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Parse nvidia-smi and nvcc output into the spark_gpu_facts fact.

Pure functions only: the module hands in a command runner, so every parser can be
tested against recorded output without a GPU.
"""

from __future__ import annotations

import csv
import re

from ansible_collections.sparkctl.spark.plugins.module_utils.values import int_or_none

GPU_QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "driver_version",
    "memory.total",
)

# What nvidia-smi prints for memory.total when the GPU has no memory of its own
# (GB10 shares LPDDR5X with the Grace CPU).
UNIFIED_MEMORY_MARKERS = frozenset(("[N/A]", "[Not Supported]", "N/A", "Not Supported"))

# Non-login SSH sessions and sudo secure_path can leave these out of PATH.
EXTRA_BIN_DIRS = ("/usr/bin", "/usr/local/bin")

_CUDA_DRIVER_VERSION_RE = re.compile(r"CUDA Version\s*:\s*(\d+\.\d+)")
_NVCC_RELEASE_RE = re.compile(r"\brelease\s+(\d+\.\d+)")
_DOTTED_VERSION_RE = re.compile(r"^(\d+)(?:\.(\d+))?")


def gpu_query_command(nvidia_smi_path):
    return [
        nvidia_smi_path,
        "--query-gpu=" + ",".join(GPU_QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def first_output_line(stdout, stderr):
    """Return the first non-blank line of stderr, else of stdout, else None."""
    for text in (stderr, stdout):
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return None


def command_failure_message(program, rc, stdout, stderr):
    return first_output_line(stdout, stderr) or "%s exited with return code %d" % (program, rc)


def version_major(version):
    """'580.95.05' -> 580, '13.0' -> 13, None or garbage -> None."""
    if not version:
        return None
    match = _DOTTED_VERSION_RE.match(version.strip())
    return int(match.group(1)) if match else None


def _parse_compute_cap(value):
    match = re.match(r"^(\d+)\.(\d+)$", value or "")
    if not match:
        return None, None
    return int(match.group(1)), int(match.group(2))


def _parse_memory_total(value):
    """Return (memory_total_mib, unified_memory) for a nounits memory.total cell."""
    if value in UNIFIED_MEMORY_MARKERS:
        return None, True
    try:
        return int(float(value)), False
    except ValueError:
        return None, False


def parse_gpu_query(text):
    """Parse `nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits`.

    Raises ValueError for a row that does not have one cell per queried field, so that
    an unexpected format is reported instead of producing half-filled entries.
    """
    gpus = []
    rows = csv.reader((text or "").splitlines(), skipinitialspace=True)
    for row in rows:
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(GPU_QUERY_FIELDS):
            raise ValueError(
                "unexpected nvidia-smi query row (expected %d fields, got %d): %s"
                % (len(GPU_QUERY_FIELDS), len(row), ", ".join(row))
            )
        cells = dict(zip(GPU_QUERY_FIELDS, (cell.strip() for cell in row)))
        compute_cap_major, compute_cap_minor = _parse_compute_cap(cells["compute_cap"])
        memory_total_mib, unified_memory = _parse_memory_total(cells["memory.total"])
        gpus.append(
            {
                "index": int_or_none(cells["index"]),
                "name": cells["name"],
                "uuid": cells["uuid"],
                "pci_bus_id": cells["pci.bus_id"],
                "compute_cap": cells["compute_cap"],
                "compute_cap_major": compute_cap_major,
                "compute_cap_minor": compute_cap_minor,
                "driver_version": cells["driver_version"],
                "driver_major": version_major(cells["driver_version"]),
                "memory_total_mib": memory_total_mib,
                "unified_memory": unified_memory,
            }
        )
    return gpus


def parse_cuda_driver_version(text):
    """Find the CUDA version the driver supports.

    Matches both `nvidia-smi --version` ('CUDA Version        : 13.0') and the banner of
    the plain `nvidia-smi` table ('CUDA Version: 13.0     |').
    """
    match = _CUDA_DRIVER_VERSION_RE.search(text or "")
    return match.group(1) if match else None


def parse_nvcc_version(text):
    """'Cuda compilation tools, release 13.0, V13.0.88' -> '13.0'."""
    match = _NVCC_RELEASE_RE.search(text or "")
    return match.group(1) if match else None


def empty_gpu_facts():
    return {
        "present": False,
        "error": None,
        "count": 0,
        "gpus": [],
        "driver_version": None,
        "driver_major": None,
        "cuda_driver_version": None,
        "cuda_driver_major": None,
        "cuda_toolkit_version": None,
        "cuda_toolkit_major": None,
        "nvcc_path": None,
    }


def _probe_cuda_driver_version(run_command, nvidia_smi_path):
    rc, stdout, stderr = run_command([nvidia_smi_path, "--version"])
    version = parse_cuda_driver_version(stdout) if rc == 0 else None
    if version:
        return version
    # Drivers older than --version (or ones that print no CUDA line) still show it in
    # the banner of the default table.
    rc, stdout, stderr = run_command([nvidia_smi_path])
    if rc != 0:
        return None
    return parse_cuda_driver_version(stdout)


def gather_gpu_facts(run_command, nvidia_smi_path, nvcc_path):
    """Build the spark_gpu_facts fact.

    run_command(args) -> (rc, stdout, stderr). nvidia_smi_path / nvcc_path are the
    resolved executables or None when not installed. Never raises for a missing GPU or
    a broken driver: the failure goes into `error`.
    """
    facts = empty_gpu_facts()

    if nvcc_path:
        facts["nvcc_path"] = nvcc_path
        rc, stdout, stderr = run_command([nvcc_path, "--version"])
        if rc == 0:
            facts["cuda_toolkit_version"] = parse_nvcc_version(stdout)
            facts["cuda_toolkit_major"] = version_major(facts["cuda_toolkit_version"])

    if not nvidia_smi_path:
        facts["error"] = "nvidia-smi not found"
        return facts

    rc, stdout, stderr = run_command(gpu_query_command(nvidia_smi_path))
    if rc != 0:
        facts["error"] = command_failure_message("nvidia-smi", rc, stdout, stderr)
        return facts
    try:
        gpus = parse_gpu_query(stdout)
    except ValueError as exc:
        facts["error"] = str(exc)
        return facts
    if not gpus:
        facts["error"] = first_output_line(stdout, stderr) or "nvidia-smi listed no GPUs"
        return facts

    facts["present"] = True
    facts["count"] = len(gpus)
    facts["gpus"] = gpus
    facts["driver_version"] = gpus[0]["driver_version"]
    facts["driver_major"] = gpus[0]["driver_major"]
    facts["cuda_driver_version"] = _probe_cuda_driver_version(run_command, nvidia_smi_path)
    facts["cuda_driver_major"] = version_major(facts["cuda_driver_version"])
    return facts


def find_first_executable(module, candidates):
    """The first of candidates an AnsibleModule finds (names in PATH and EXTRA_BIN_DIRS, absolute paths as they are)."""
    for candidate in candidates:
        path = module.get_bin_path(candidate, opt_dirs=list(EXTRA_BIN_DIRS))
        if path:
            return path
    return None


def read_gpu_facts(module, nvidia_smi="nvidia-smi", nvcc=("/usr/local/cuda/bin/nvcc", "nvcc")):
    """The spark_gpu_facts fact as an AnsibleModule reads it: gpu_facts' and preflight_facts' one reader."""
    def run_command(args):
        return module.run_command(args, check_rc=False)

    return gather_gpu_facts(run_command, find_first_executable(module, [nvidia_smi]), find_first_executable(module, nvcc))
