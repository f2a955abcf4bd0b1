"""sparkctl.spark.gpu_facts: nvidia-smi and nvcc output in, spark_gpu_facts fact out.

The recorded outputs are reconstructed, not captured; see fixtures/nvidia_smi/README.md.
"""

from __future__ import annotations

from pathlib import Path

import module_runner
import pytest
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import gpu
from ansible_collections.sparkctl.spark.plugins.modules import gpu_facts

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
NVCC = "/usr/local/cuda/bin/nvcc"
QUERY = (
    NVIDIA_SMI,
    "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total",
    "--format=csv,noheader,nounits",
)
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)

GB10 = {
    "index": 0,
    "name": "NVIDIA GB10",
    "uuid": "GPU-6a1f0c52-3d2b-8e4f-a9c7-1b2d3e4f5a6b",
    "pci_bus_id": "0000000F:01:00.0",
    "compute_cap": "12.1",
    "compute_cap_major": 12,
    "compute_cap_minor": 1,
    "driver_version": "580.95.05",
    "driver_major": 580,
    "memory_total_mib": None,
    "unified_memory": True,
}

GB10_FACTS = {
    "present": True,
    "error": None,
    "count": 1,
    "gpus": [GB10],
    "driver_version": "580.95.05",
    "driver_major": 580,
    "cuda_driver_version": "13.0",
    "cuda_driver_major": 13,
    "cuda_toolkit_version": "13.0",
    "cuda_toolkit_major": 13,
    "nvcc_path": NVCC,
}


def fixture(name):
    return (FIXTURES / name).read_text()


class FakeRunner:
    """Answers commands from a table and records what was run; unknown commands fail the test."""

    def __init__(self, answers):
        self.answers = dict((tuple(args), answer) for args, answer in answers.items())
        self.calls = []

    def __call__(self, args):
        self.calls.append(tuple(args))
        if tuple(args) not in self.answers:
            raise AssertionError("unexpected command: %r" % (args,))
        return self.answers[tuple(args)]


def gb10_answers():
    return {
        QUERY: (0, fixture("gb10_580_query.csv"), ""),
        (NVIDIA_SMI, "--version"): (0, fixture("gb10_580_version.txt"), ""),
        (NVIDIA_SMI,): (0, fixture("gb10_580_table.txt"), ""),
        (NVCC, "--version"): (0, fixture("nvcc_13.0.txt"), ""),
    }


# --- parsers -------------------------------------------------------------------------


def test_gb10_query_row_reports_unified_memory_and_sm121():
    assert gpu.parse_gpu_query(fixture("gb10_580_query.csv")) == [GB10]


def test_h100_query_rows_report_dedicated_memory():
    gpus = gpu.parse_gpu_query(fixture("h100_550_query.csv"))

    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1] == {
        "index": 1,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-7d8e9f0a-1b2c-4d3e-8f4a-5b6c7d8e9f01",
        "pci_bus_id": "00000000:2A:00.0",
        "compute_cap": "9.0",
        "compute_cap_major": 9,
        "compute_cap_minor": 0,
        "driver_version": "550.54.15",
        "driver_major": 550,
        "memory_total_mib": 81559,
        "unified_memory": False,
    }


@pytest.mark.parametrize("cell", ["[N/A]", "[Not Supported]", "N/A"])
def test_memory_markers_mean_unified_memory(cell):
    row = "0, NVIDIA GB10, GPU-x, 0000000F:01:00.0, 12.1, 580.95.05, %s\n" % cell

    parsed = gpu.parse_gpu_query(row)[0]

    assert (parsed["memory_total_mib"], parsed["unified_memory"]) == (None, True)


def test_unparsable_compute_cap_gives_null_parts():
    row = "0, Some GPU, GPU-x, 00000000:01:00.0, [N/A], 580.95.05, 1024\n"

    parsed = gpu.parse_gpu_query(row)[0]

    assert (parsed["compute_cap_major"], parsed["compute_cap_minor"], parsed["memory_total_mib"]) == (None, None, 1024)


def test_query_row_with_missing_fields_is_rejected():
    with pytest.raises(ValueError, match="expected 7 fields, got 3"):
        gpu.parse_gpu_query("0, NVIDIA GB10, 12.1\n")


def test_blank_query_output_lists_no_gpu():
    assert gpu.parse_gpu_query("\n\n") == []


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gb10_580_version.txt", "13.0"),
        ("gb10_580_table.txt", "13.0"),
        ("h100_550_version.txt", "12.4"),
        ("h100_550_table.txt", "12.4"),
        ("version_unsupported.txt", None),
        ("driver_failed.txt", None),
    ],
)
def test_cuda_driver_version_from_version_and_table(name, expected):
    assert gpu.parse_cuda_driver_version(fixture(name)) == expected


@pytest.mark.parametrize(
    "name, expected",
    [("nvcc_13.0.txt", "13.0"), ("nvcc_12.4.txt", "12.4"), ("driver_failed.txt", None)],
)
def test_nvcc_release(name, expected):
    assert gpu.parse_nvcc_version(fixture(name)) == expected


@pytest.mark.parametrize(
    "version, expected",
    [("580.95.05", 580), ("13.0", 13), ("12", 12), ("", None), (None, None), ("[N/A]", None)],
)
def test_version_major(version, expected):
    assert gpu.version_major(version) == expected


# --- gather_gpu_facts ----------------------------------------------------------------


def test_gb10_host_facts():
    runner = FakeRunner(gb10_answers())

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, NVCC)

    assert facts == GB10_FACTS
    # --version answered, so the table is not needed.
    assert runner.calls == [(NVCC, "--version"), QUERY, (NVIDIA_SMI, "--version")]


def old_driver(query_csv, table_rc, table):
    """A driver whose nvidia-smi answers the query with query_csv, does not know --version, and
    answers the plain table with table_rc and the fixture table."""
    return FakeRunner(
        {
            QUERY: (0, fixture(query_csv), ""),
            (NVIDIA_SMI, "--version"): (2, fixture("version_unsupported.txt"), ""),
            (NVIDIA_SMI,): (table_rc, fixture(table), ""),
        }
    )


def test_old_driver_without_version_flag_falls_back_to_table_banner():
    runner = old_driver("h100_550_query.csv", 0, "h100_550_table.txt")

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, None)

    assert facts["present"] is True
    assert facts["count"] == 2
    assert [g["memory_total_mib"] for g in facts["gpus"]] == [81559, 81559]
    assert (facts["driver_version"], facts["driver_major"]) == ("550.54.15", 550)
    assert (facts["cuda_driver_version"], facts["cuda_driver_major"]) == ("12.4", 12)
    assert (facts["cuda_toolkit_version"], facts["cuda_toolkit_major"], facts["nvcc_path"]) == (None, None, None)
    assert runner.calls[-1] == (NVIDIA_SMI,)


def test_cuda_driver_version_is_null_when_neither_source_answers():
    runner = old_driver("gb10_580_query.csv", 9, "driver_failed.txt")

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, None)

    assert facts["present"] is True
    assert (facts["cuda_driver_version"], facts["cuda_driver_major"]) == (None, None)


def test_broken_driver_is_reported_not_raised():
    runner = FakeRunner(
        {
            QUERY: (9, fixture("driver_failed.txt"), ""),
            (NVCC, "--version"): (0, fixture("nvcc_13.0.txt"), ""),
        }
    )

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, NVCC)

    assert facts == dict(
        gpu.empty_gpu_facts(),
        error=DRIVER_FAILED,
        cuda_toolkit_version="13.0",
        cuda_toolkit_major=13,
        nvcc_path=NVCC,
    )


def test_missing_nvidia_smi_is_reported_and_nothing_is_run_for_it():
    runner = FakeRunner({})

    facts = gpu.gather_gpu_facts(runner, None, None)

    assert facts == dict(gpu.empty_gpu_facts(), error="nvidia-smi not found")
    assert runner.calls == []


def test_no_devices_message_becomes_the_error():
    runner = FakeRunner({QUERY: (6, fixture("no_devices.txt"), "")})

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, None)

    assert (facts["present"], facts["error"], facts["count"]) == (False, "No devices were found", 0)


def test_silent_failure_names_the_return_code():
    runner = FakeRunner({QUERY: (255, "", "")})

    assert gpu.gather_gpu_facts(runner, NVIDIA_SMI, None)["error"] == "nvidia-smi exited with return code 255"


def test_stderr_is_preferred_for_the_error():
    runner = FakeRunner({QUERY: (1, "", "\nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n")})

    assert gpu.gather_gpu_facts(runner, NVIDIA_SMI, None)["error"] == "Failed to initialize NVML: Driver/library version mismatch"


def test_failing_nvcc_keeps_its_path_but_no_version():
    runner = FakeRunner(gb10_answers())
    runner.answers[(NVCC, "--version")] = (127, "", "cannot execute binary file")

    facts = gpu.gather_gpu_facts(runner, NVIDIA_SMI, NVCC)

    assert (facts["nvcc_path"], facts["cuda_toolkit_version"], facts["cuda_toolkit_major"]) == (NVCC, None, None)
    assert facts["present"] is True


# --- the module ----------------------------------------------------------------------


def run_module(args, capsys):
    return module_runner.run_module(gpu_facts.main, args, capsys)


@pytest.fixture
def fake_host(monkeypatch):
    """Patch AnsibleModule so that executables and command outputs come from the test."""
    state = {"binaries": {}, "lookups": [], "runner": FakeRunner({})}

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        state["lookups"].append((arg, tuple(opt_dirs or ())))
        return state["binaries"].get(arg)

    def run_command(self, args, check_rc=False, **kwargs):
        assert check_rc is False
        return state["runner"](args)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return state


def test_module_reports_gb10(fake_host, capsys):
    fake_host["binaries"] = {"nvidia-smi": NVIDIA_SMI, "/usr/local/cuda/bin/nvcc": NVCC}
    fake_host["runner"] = FakeRunner(gb10_answers())

    rc, result = run_module({}, capsys)

    assert rc == 0
    assert result["changed"] is False
    assert "failed" not in result
    assert result["ansible_facts"] == {"spark_gpu_facts": GB10_FACTS}
    assert fake_host["lookups"][0] == ("nvidia-smi", ("/usr/bin", "/usr/local/bin"))


def test_module_in_check_mode_reports_the_same_and_changes_nothing(fake_host, capsys):
    fake_host["binaries"] = {"nvidia-smi": NVIDIA_SMI, "/usr/local/cuda/bin/nvcc": NVCC}
    fake_host["runner"] = FakeRunner(gb10_answers())

    rc, result = run_module({"_ansible_check_mode": True}, capsys)

    assert rc == 0
    assert result["changed"] is False
    assert result["ansible_facts"]["spark_gpu_facts"] == GB10_FACTS


def test_module_takes_the_first_nvcc_that_exists(fake_host, capsys):
    fake_host["binaries"] = {"nvidia-smi": NVIDIA_SMI, "nvcc": "/opt/cuda/bin/nvcc"}
    answers = gb10_answers()
    del answers[(NVCC, "--version")]
    answers[("/opt/cuda/bin/nvcc", "--version")] = (0, fixture("nvcc_12.4.txt"), "")
    fake_host["runner"] = FakeRunner(answers)

    rc, result = run_module({}, capsys)

    facts = result["ansible_facts"]["spark_gpu_facts"]
    assert (facts["nvcc_path"], facts["cuda_toolkit_version"], facts["cuda_toolkit_major"]) == ("/opt/cuda/bin/nvcc", "12.4", 12)
    assert [arg for arg, _dirs in fake_host["lookups"]] == ["nvidia-smi", "/usr/local/cuda/bin/nvcc", "nvcc"]


def test_module_without_nvidia_smi_reports_instead_of_failing(fake_host, capsys):
    rc, result = run_module({"nvidia_smi": "/opt/nvidia/nvidia-smi", "nvcc": []}, capsys)

    assert rc == 0
    assert "failed" not in result
    assert result["changed"] is False
    assert result["ansible_facts"]["spark_gpu_facts"] == dict(gpu.empty_gpu_facts(), error="nvidia-smi not found")
    assert fake_host["lookups"] == [("/opt/nvidia/nvidia-smi", ("/usr/bin", "/usr/local/bin"))]


def test_module_with_broken_driver_reports_instead_of_failing(fake_host, capsys):
    fake_host["binaries"] = {"nvidia-smi": NVIDIA_SMI}
    fake_host["runner"] = FakeRunner({QUERY: (9, fixture("driver_failed.txt"), "")})

    rc, result = run_module({"nvcc": ["nvcc"]}, capsys)

    assert rc == 0
    assert "failed" not in result
    assert result["ansible_facts"]["spark_gpu_facts"]["present"] is False
    assert result["ansible_facts"]["spark_gpu_facts"]["error"] == DRIVER_FAILED
