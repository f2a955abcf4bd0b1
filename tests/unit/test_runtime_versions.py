"""sparkctl.spark.runtime_versions: driver, CUDA, NCCL, torch, packages and the runtime's own
identity (venv lock hash, image id), from recorded tool output and from a real throwaway venv."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

import module_runner
import pytest
import yaml
from ansible.module_utils import basic
from ansible_collections.sparkctl.spark.plugins.module_utils import runtime_versions as rv
from ansible_collections.sparkctl.spark.plugins.modules import runtime_versions as runtime_versions_module

GPU_FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
DOCKER = "/usr/bin/docker"
VENV = "/opt/sparkctl/venvs/solar-open2"
VENV_PYTHON = VENV + "/bin/python"
GPU_QUERY = (
    NVIDIA_SMI,
    "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total",
    "--format=csv,noheader,nounits",
)
IMAGE = "cr.backend.ai/stable/ngc-vllm:26.06-cuda13.3-ubuntu24.04-solaropen2"
IMAGE_ID = "sha256:4f1d8a6c0b2e9d7f3a5c8e1b0d2f4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b6d8f"
# `docker image inspect IMAGE`, trimmed to the keys around the ones read.
IMAGE_INSPECT = json.dumps([{
    "Id": IMAGE_ID,
    "RepoTags": [IMAGE],
    "RepoDigests": ["cr.backend.ai/stable/ngc-vllm@sha256:9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"],
    "Created": "2026-06-18T04:11:52.118270031Z",
    "Config": {"Env": ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
               "Entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"],
               "Labels": {"com.nvidia.build.id": "193847261", "org.sparkctl.context-hash": "sparkctl-context-hash/1:5e1f"}},
    "Architecture": "arm64",
    "Os": "linux",
    "RootFS": {"Type": "layers", "Layers": ["sha256:0a1b", "sha256:2c3d"]},
}], indent=4)
DISTRIBUTIONS = [
    ["vllm", "0.25.1"],
    ["torch", "2.11.0+cu130"],
    ["nvidia-nccl-cu13", "2.28.9"],
    ["Flashinfer_Python", "0.5.3"],
    ["transformers", "4.57.1"],
]
PROBE_OUTPUT = json.dumps({"python": "3.12.3", "distributions": DISTRIBUTIONS}) + "\n"


# What the module returns besides changed; RETURN documents exactly these.
RETURNED = {"versions", "problems", "nccl_preload"}


def gpu_fixture(name):
    return (GPU_FIXTURES / name).read_text()


class FakeRunner:
    """Answers commands from a table and records them; an unknown command fails the test."""

    def __init__(self, answers):
        self.answers = {tuple(args): answer for args, answer in answers.items()}
        self.calls = []

    def __call__(self, args):
        self.calls.append(tuple(args))
        if tuple(args) not in self.answers:
            raise AssertionError(f"unexpected command: {args!r}")
        return self.answers[tuple(args)]


def gb10_answers(extra=None):
    answers = {
        GPU_QUERY: (0, gpu_fixture("gb10_580_query.csv"), ""),
        (NVIDIA_SMI, "--version"): (0, gpu_fixture("gb10_580_version.txt"), ""),
    }
    answers.update(extra or {})
    return answers


def probe_argv(python=VENV_PYTHON):
    return tuple(rv.venv_probe_argv(python))


def only(*paths):
    return lambda path: path in paths


# --- parsers -------------------------------------------------------------------------------


def test_probe_output_is_parsed_even_after_noise():
    parsed = rv.parse_venv_probe("sitecustomize: hello\n" + PROBE_OUTPUT)

    assert parsed == {"python": "3.12.3", "distributions": DISTRIBUTIONS}


@pytest.mark.parametrize(
    "text", ["", "Traceback (most recent call last):\n  ModuleNotFoundError: importlib.metadata\n", "{not json}\n", '{"python": "3.12"}\n'])
def test_probe_output_without_the_list_is_an_error(text):
    with pytest.raises(ValueError, match="printed no distribution list"):
        rv.parse_venv_probe(text)


def test_lock_hash_is_the_sha256_of_sorted_normalized_lines():
    expected = hashlib.sha256(
        b"flashinfer-python==0.5.3\nnvidia-nccl-cu13==2.28.9\ntorch==2.11.0+cu130\ntransformers==4.57.1\nvllm==0.25.1\n"
    ).hexdigest()

    assert rv.lock_sha256(DISTRIBUTIONS) == expected
    # The order Python lists them in and the spelling of a name do not matter; a version does.
    assert rv.lock_sha256(list(reversed(DISTRIBUTIONS))) == expected
    assert rv.lock_sha256([["flashinfer-python", "0.5.3"]] + DISTRIBUTIONS[:3] + DISTRIBUTIONS[4:]) == expected
    assert rv.lock_sha256([["vllm", "0.25.2"]] + DISTRIBUTIONS[1:]) != expected
    assert rv.lock_sha256(DISTRIBUTIONS[1:]) != expected


def test_the_newest_cuda_nccl_wheel_is_the_one_counted():
    assert rv.nccl_wheel(DISTRIBUTIONS) == ("2.28.9", "nvidia-nccl-cu13")
    assert rv.nccl_wheel([["nvidia_nccl_cu12", "2.27.3"], ["nvidia-nccl-cu13", "2.28.9"]]) == ("2.28.9", "nvidia-nccl-cu13")
    assert rv.nccl_wheel([["vllm", "0.25.1"]]) == (None, None)


def test_image_inspect_gives_the_id_and_sparkctls_build_label():
    assert rv.parse_image_inspect(IMAGE_INSPECT) == {"id": IMAGE_ID, "context_hash": "sparkctl-context-hash/1:5e1f"}
    unlabelled = json.loads(IMAGE_INSPECT)
    unlabelled[0]["Config"]["Labels"] = None
    assert rv.parse_image_inspect(json.dumps(unlabelled)) == {"id": IMAGE_ID, "context_hash": None}
    with pytest.raises(ValueError):
        rv.parse_image_inspect("[]")


def test_preload_version_comes_from_the_library_the_path_resolves_to(tmp_path):
    lib = tmp_path / "nccl-2.30.7" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2.30.7").write_bytes(b"\x7fELF")
    (lib / "libnccl.so.2").symlink_to("libnccl.so.2.30.7")

    assert rv.nccl_file_version(str(lib / "libnccl.so.2")) == "2.30.7"
    assert rv.preload_facts({"version": "2.30.7", "path": str(lib / "libnccl.so.2")}) == {
        "path": str(lib / "libnccl.so.2"), "version": "2.30.7", "exists": True, "file_version": "2.30.7"}
    assert rv.preload_facts({"version": "2.30.7", "path": str(tmp_path / "gone.so.2")})["exists"] is False
    assert rv.preload_facts({"version": "2.30.7", "path": ""}) is None
    assert rv.preload_facts(None) is None


# --- gather_runtime_versions ---------------------------------------------------------------


def test_venv_node_reports_everything_from_one_probe():
    runner = FakeRunner(gb10_answers({probe_argv(): (0, PROBE_OUTPUT, "")}))

    result = rv.gather_runtime_versions(runner, "venv", NVIDIA_SMI, venv_path=VENV,
                                        packages=["vllm==0.25.1", "flashinfer-python", "torch", "missing-pkg"],
                                        exists=only(VENV_PYTHON))

    assert result["problems"] == [] and result["nccl_preload"] is None
    assert result["versions"] == {
        "driver": "580.95.05",
        "cuda": "13.0",
        "nccl": "2.28.9",
        "nccl_source": "venv",
        "torch": "2.11.0+cu130",
        "python": "3.12.3",
        "venv_lock_sha256": rv.lock_sha256(DISTRIBUTIONS),
        "image_id": None,
        "image_context_hash": None,
        "packages": {"vllm": "0.25.1", "flashinfer-python": "0.5.3", "torch": "2.11.0+cu130", "missing-pkg": None},
    }
    assert [call for call in runner.calls if call == probe_argv()] == [probe_argv()]
    assert probe_argv()[1] == "-I"


def _with_preload(tmp_path, library_version):
    """gather_runtime_versions with a preload declared as 2.30.7 whose libnccl.so.2 links to library_version's file."""
    lib = tmp_path / f"libnccl.so.{library_version}"
    lib.write_bytes(b"")
    link = tmp_path / "libnccl.so.2"
    link.symlink_to(lib.name)
    runner = FakeRunner(gb10_answers({probe_argv(): (0, PROBE_OUTPUT, "")}))
    result = rv.gather_runtime_versions(runner, "venv", NVIDIA_SMI, venv_path=VENV,
                                        nccl_preload={"version": "2.30.7", "path": str(link)},
                                        exists=lambda path: path == VENV_PYTHON or Path(path).exists())
    return result, link


def test_an_existing_preload_is_the_nccl_that_runs(tmp_path):
    result, _link = _with_preload(tmp_path, "2.30.7")

    assert (result["versions"]["nccl"], result["versions"]["nccl_source"]) == ("2.30.7", "preload")
    assert result["nccl_preload"]["exists"] is True and result["problems"] == []


def test_a_preload_whose_library_is_another_version_says_so(tmp_path):
    result, link = _with_preload(tmp_path, "2.28.9")

    assert (result["versions"]["nccl"], result["versions"]["nccl_source"]) == ("2.28.9", "preload")
    assert result["problems"] == [f"NCCL preload {link} is 2.28.9, the profile says 2.30.7"]


def test_a_missing_preload_falls_back_to_the_venvs_nccl_and_is_a_problem():
    runner = FakeRunner(gb10_answers({probe_argv(): (0, PROBE_OUTPUT, "")}))

    result = rv.gather_runtime_versions(runner, "venv", NVIDIA_SMI, venv_path=VENV,
                                        nccl_preload={"version": "2.30.7", "path": "/opt/sparkctl/nccl/libnccl.so.2"},
                                        exists=only(VENV_PYTHON))

    assert (result["versions"]["nccl"], result["versions"]["nccl_source"]) == ("2.28.9", "venv")
    assert result["nccl_preload"] == {"path": "/opt/sparkctl/nccl/libnccl.so.2", "version": "2.30.7", "exists": False,
                                      "file_version": None}
    assert result["problems"] == ["NCCL preload /opt/sparkctl/nccl/libnccl.so.2 does not exist: the dynamic loader "
                                  "skips it and the engine runs NCCL 2.28.9 from the venv"]


def test_without_nvidia_smi_driver_and_cuda_are_null_and_a_problem():
    runner = FakeRunner({probe_argv(): (0, PROBE_OUTPUT, "")})

    result = rv.gather_runtime_versions(runner, "venv", None, venv_path=VENV, exists=only(VENV_PYTHON))

    assert (result["versions"]["driver"], result["versions"]["cuda"]) == (None, None)
    assert result["versions"]["torch"] == "2.11.0+cu130"
    assert result["problems"] == ["nvidia-smi: nvidia-smi not found"]


def test_a_broken_driver_is_a_problem_not_an_error():
    runner = FakeRunner({GPU_QUERY: (9, gpu_fixture("driver_failed.txt"), ""), probe_argv(): (0, PROBE_OUTPUT, "")})

    result = rv.gather_runtime_versions(runner, "venv", NVIDIA_SMI, venv_path=VENV, exists=only(VENV_PYTHON))

    assert result["versions"]["driver"] is None
    assert result["problems"] == ["nvidia-smi: " + gpu_fixture("driver_failed.txt").strip()]


def test_a_venv_without_python_or_with_a_failing_probe_is_a_problem():
    missing = rv.gather_runtime_versions(FakeRunner(gb10_answers()), "venv", NVIDIA_SMI, venv_path=VENV,
                                         packages=["vllm"], exists=only())
    failing = rv.gather_runtime_versions(
        FakeRunner(gb10_answers({probe_argv(): (1, "", "Traceback (most recent call last):\nImportError: bad\n")})),
        "venv", NVIDIA_SMI, venv_path=VENV, exists=only(VENV_PYTHON))

    assert missing["problems"] == [f"venv {VENV} has no bin/python"]
    assert missing["versions"]["packages"] == {"vllm": None} and missing["versions"]["venv_lock_sha256"] is None
    assert failing["problems"] == [f"{VENV_PYTHON} failed: ImportError: bad"]
    assert failing["versions"]["driver"] == "580.95.05" and failing["versions"]["python"] is None


def test_two_nccl_wheels_are_reported():
    dists = DISTRIBUTIONS + [["nvidia-nccl-cu12", "2.27.3"]]
    runner = FakeRunner(gb10_answers({probe_argv(): (0, json.dumps({"python": "3.12.3", "distributions": dists}), "")}))

    result = rv.gather_runtime_versions(runner, "venv", NVIDIA_SMI, venv_path=VENV, exists=only(VENV_PYTHON))

    assert result["versions"]["nccl"] == "2.28.9"
    assert result["problems"] == [f"several NCCL wheels in {VENV} (nvidia-nccl-cu12, nvidia-nccl-cu13): torch loads one, "
                                  "counted here as nvidia-nccl-cu13"]


def test_image_node_reports_the_image_and_its_declared_nccl():
    runner = FakeRunner(gb10_answers({(DOCKER, "image", "inspect", IMAGE): (0, IMAGE_INSPECT, "")}))

    result = rv.gather_runtime_versions(runner, "image", NVIDIA_SMI, docker_path=DOCKER, image=IMAGE,
                                        packages=["vllm"], image_nccl_version="2.30.7", exists=only())

    versions = result["versions"]
    assert result["problems"] == []
    assert (versions["image_id"], versions["image_context_hash"]) == (IMAGE_ID, "sparkctl-context-hash/1:5e1f")
    assert (versions["nccl"], versions["nccl_source"]) == ("2.30.7", "image")
    assert (versions["torch"], versions["python"], versions["venv_lock_sha256"]) == (None, None, None)
    assert versions["packages"] == {"vllm": None}


CONTAINER = "sparkctl-ray-head"
# What the probe prints inside the engine's running container (an image sparkctl did not build:
# no lock, only what it reports of itself).
IMAGE_DISTRIBUTIONS = [["vLLM", "0.12.0+nv26.06"], ["torch", "2.10.0a0+nv26.06"], ["ray", "2.52.1"]]


def exec_probe_argv(container=CONTAINER):
    return (DOCKER, "exec", container, "python3", "-I", "-c", rv.VENV_PROBE_SCRIPT)


def test_image_node_reads_the_engine_version_inside_its_running_container():
    runner = FakeRunner(gb10_answers({
        (DOCKER, "image", "inspect", IMAGE): (0, IMAGE_INSPECT, ""),
        exec_probe_argv(): (0, json.dumps({"python": "3.12.9", "distributions": IMAGE_DISTRIBUTIONS}), ""),
    }))

    result = rv.gather_runtime_versions(runner, "image", NVIDIA_SMI, docker_path=DOCKER, image=IMAGE,
                                        image_container=CONTAINER, packages=["vllm", "torch"], exists=only())

    versions = result["versions"]
    assert result["problems"] == []
    assert versions["image_id"] == IMAGE_ID
    assert (versions["python"], versions["torch"]) == ("3.12.9", "2.10.0a0+nv26.06")
    assert versions["packages"] == {"vllm": "0.12.0+nv26.06", "torch": "2.10.0a0+nv26.06"}
    # The image's id is its identity: a lock hash is a venv's.
    assert versions["venv_lock_sha256"] is None


def test_a_container_that_does_not_run_is_a_problem_not_a_version():
    runner = FakeRunner(gb10_answers({
        (DOCKER, "image", "inspect", IMAGE): (0, IMAGE_INSPECT, ""),
        exec_probe_argv(): (1, "", f"Error response from daemon: No such container: {CONTAINER}\n"),
    }))

    result = rv.gather_runtime_versions(runner, "image", NVIDIA_SMI, docker_path=DOCKER, image=IMAGE,
                                        image_container=CONTAINER, packages=["vllm"], exists=only())

    assert result["versions"]["image_id"] == IMAGE_ID
    assert result["versions"]["packages"] == {"vllm": None}
    assert result["problems"] == [f"docker exec {CONTAINER}: Error response from daemon: No such container: {CONTAINER}"]


def test_image_problems_missing_docker_and_missing_image():
    no_docker = rv.gather_runtime_versions(FakeRunner(gb10_answers()), "image", NVIDIA_SMI, image=IMAGE)
    no_image = rv.gather_runtime_versions(
        FakeRunner(gb10_answers({(DOCKER, "image", "inspect", IMAGE): (1, "[]\n", f"Error: No such image: {IMAGE}\n")})),
        "image", NVIDIA_SMI, docker_path=DOCKER, image=IMAGE)

    assert no_docker["problems"] == ["docker not found"]
    assert no_image["problems"] == [f"docker image inspect {IMAGE}: Error: No such image: {IMAGE}"]
    assert no_image["versions"]["image_id"] is None and no_image["versions"]["nccl_source"] == "none"


# --- a real venv -----------------------------------------------------------------------------


def real_runner(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def add_distribution(venv, name, version):
    site = next(venv.glob("lib/python3*/site-packages"))
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def venv(tmp_path):
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


def test_real_venv_probe_and_lock_hash(venv, tmp_path, monkeypatch):
    # -I keeps the caller's PYTHONPATH out of the venv's view: what it holds is not installed in the venv.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "intruder-9.9.dist-info").mkdir(parents=True)
    (elsewhere / "intruder-9.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: intruder\nVersion: 9.9\n")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    empty = rv.gather_runtime_versions(real_runner, "venv", None, venv_path=str(venv), packages=["torch", "Fake.Pkg"])

    assert empty["versions"]["python"] == platform.python_version()
    assert empty["versions"]["venv_lock_sha256"] == hashlib.sha256(b"").hexdigest()
    assert empty["versions"]["packages"] == {"torch": None, "Fake.Pkg": None}

    add_distribution(venv, "fake_pkg", "1.0")
    add_distribution(venv, "torch", "2.11.0+cu130")
    add_distribution(venv, "nvidia_nccl_cu13", "2.28.9")
    filled = rv.gather_runtime_versions(real_runner, "venv", None, venv_path=str(venv), packages=["torch", "Fake.Pkg"])

    versions = filled["versions"]
    assert versions["venv_lock_sha256"] == hashlib.sha256(
        b"fake-pkg==1.0\nnvidia-nccl-cu13==2.28.9\ntorch==2.11.0+cu130\n").hexdigest()
    assert versions["packages"] == {"torch": "2.11.0+cu130", "Fake.Pkg": "1.0"}
    assert (versions["torch"], versions["nccl"], versions["nccl_source"]) == ("2.11.0+cu130", "2.28.9", "venv")
    assert filled["problems"] == ["nvidia-smi: nvidia-smi not found"]

    add_distribution(venv, "another", "0.1")
    again = rv.gather_runtime_versions(real_runner, "venv", None, venv_path=str(venv))
    assert again["versions"]["venv_lock_sha256"] not in (versions["venv_lock_sha256"], empty["versions"]["venv_lock_sha256"])


# --- the module ----------------------------------------------------------------------------


@pytest.fixture
def fake_host(monkeypatch):
    state = {"binaries": {}, "runner": None, "lookups": []}

    def get_bin_path(self, name, required=False, opt_dirs=None):
        state["lookups"].append(name)
        return state["binaries"].get(name)

    def run_command(self, args, check_rc=False, **kwargs):
        assert check_rc is False
        if state["runner"] is None:
            return real_runner(args)
        return state["runner"](args)

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return state


def run(args, capsys):
    return module_runner.run_module(runtime_versions_module.main, args, capsys)


def test_module_on_a_real_venv_in_check_mode(fake_host, venv, capsys):
    add_distribution(venv, "vllm", "0.25.1")

    rc, result = run({"runtime_kind": "venv", "venv_path": str(venv), "packages": ["vllm==0.25.1", "torch"],
                      "_ansible_check_mode": True}, capsys)

    assert rc == 0 and result["changed"] is False and not result.get("failed")
    assert set(result) - {"changed", "invocation"} == RETURNED
    assert set(result["versions"]) == set(yaml.safe_load(runtime_versions_module.RETURN)["versions"]["contains"])
    assert result["versions"]["packages"] == {"vllm": "0.25.1", "torch": None}
    assert result["versions"]["venv_lock_sha256"] == hashlib.sha256(b"vllm==0.25.1\n").hexdigest()
    assert result["problems"] == ["nvidia-smi: nvidia-smi not found"]
    assert result["nccl_preload"] is None
    assert fake_host["lookups"] == ["nvidia-smi"]


def test_module_on_an_image_node(fake_host, capsys):
    fake_host["binaries"] = {"nvidia-smi": NVIDIA_SMI, "docker": DOCKER}
    fake_host["runner"] = FakeRunner(gb10_answers({(DOCKER, "image", "inspect", IMAGE): (0, IMAGE_INSPECT, "")}))

    rc, result = run({"runtime_kind": "image", "image": IMAGE,
                      "nccl_preload": {"version": "2.30.7", "path": "/nonexistent/sparkctl/libnccl.so.2"}}, capsys)

    assert rc == 0
    assert result["versions"]["image_id"] == IMAGE_ID and result["versions"]["driver"] == "580.95.05"
    assert (result["versions"]["nccl"], result["versions"]["nccl_source"]) == (None, "none")
    assert result["nccl_preload"]["exists"] is False
    assert result["problems"] == ["NCCL preload /nonexistent/sparkctl/libnccl.so.2 does not exist: the dynamic loader "
                                  "skips it and the engine runs the runtime's own NCCL"]


@pytest.mark.parametrize(
    "args, message",
    [({"runtime_kind": "venv"}, "venv_path"), ({"runtime_kind": "image"}, "image"), ({"runtime_kind": "conda"}, "runtime_kind")],
)
def test_module_refuses_incomplete_arguments(fake_host, capsys, args, message):
    rc, result = run(args, capsys)

    assert rc == 1 and result["failed"] is True and message in result["msg"]


def test_documentation_names_what_the_module_returns():
    # Options against the argument spec, and EXAMPLES: test_module_documentation.py, for every module.
    assert module_runner.documentation(runtime_versions_module)["attributes"]["check_mode"]["support"] == "full"
    assert set(yaml.safe_load(runtime_versions_module.RETURN)) == RETURNED
