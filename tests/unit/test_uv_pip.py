"""tests/uv_pip.sh, which installs the project's and the real server's venvs with uv: uv reads
none of pip's configuration, so the script passes on what a machine keeps there (its local
wheels and caps) and the machine's certificate store, and puts uv in at requirements/uv.txt's
pin. The venv's python and uv are fakes here that record how they were called."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "uv_pip.sh"
UV_PIN = re.search(r"^uv==(\S+)", (REPO / "requirements" / "uv.txt").read_text(), re.M).group(1)


def _fake_venv(tmp_path: Path, pip_config: str, uv_version: str | None) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    python = venv / "bin" / "python"
    python.write_text(f"""#!/bin/sh
echo "python $*" >> {calls}
if [ "$*" = "-m pip config list" ]; then printf '%s' "$PIP_CONFIG"; fi
if [ "$1" = -c ]; then echo {venv}/lib/site-packages; fi
if [ "$1 $2 $3" = "-m pip install" ]; then
  printf '#!/bin/sh\\nif [ "$1" = --version ]; then echo "uv {UV_PIN}"; else echo "uv $*" >> {calls}; fi\\n' > {venv}/bin/uv
  chmod +x {venv}/bin/uv
fi
""")
    python.chmod(0o755)
    if uv_version:
        uv = venv / "bin" / "uv"
        uv.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "uv {uv_version}"; else echo "uv $*" >> {calls}; fi\n')
        uv.chmod(0o755)
    return venv


def _run(tmp_path, pip_config="", uv_version=None, options=()):
    venv = _fake_venv(tmp_path, pip_config, uv_version)
    proc = subprocess.run(["bash", str(SCRIPT), *options, str(venv), "-r", "reqs.txt", "-e", "."], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PIP_CONFIG": pip_config}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "calls").read_text().splitlines()


def test_pips_find_links_and_constraints_and_the_system_certificates_reach_uv(tmp_path):
    config = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
              "global.constraint='/etc/xdg/pip/constraints.txt'\n"
              "global.find-links='/opt/wheels /srv/wheels'\n"
              ":env:.find-links='/opt/wheels'\n")
    calls = _run(tmp_path, config, uv_version=UV_PIN)
    install = [c for c in calls if c.startswith("uv ")]
    assert len(install) == 1, calls
    args = install[0].split()
    assert args[:3] == ["uv", "pip", "install"]
    for wanted in ("--system-certs", "-r reqs.txt -e ."):
        assert wanted in install[0], install[0]
    assert install[0].count("--find-links /opt/wheels ") == 1, install[0]
    assert "--find-links /srv/wheels" in install[0] and "--constraint /etc/xdg/pip/constraints.txt" in install[0]
    assert not any("pip install" in c for c in calls if c.startswith("python")), "uv was at its pin: pip must not run"


def test_uv_comes_in_by_pip_at_the_pin_when_missing_or_at_another_version(tmp_path):
    for uv_version in (None, "0.0.1"):
        case = tmp_path / str(uv_version)
        case.mkdir()
        calls = _run(case, uv_version=uv_version)
        pip_installs = [c for c in calls if c.startswith("python -m pip install")]
        assert pip_installs == [f"python -m pip install --disable-pip-version-check -q -r {REPO}/requirements/uv.txt"], calls
        install = [c for c in calls if c.startswith("uv pip install")]
        assert len(install) == 1 and "--find-links" not in install[0] and "--constraint" not in install[0], calls


def test_byte_code_is_compiled_after_the_install_but_where_the_expression_finds_the_path(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    calls = _run(plain, uv_version=UV_PIN)
    compiles = [c for c in calls if "-m compileall" in c]
    assert compiles == [f"python -m compileall -q -j 0 {plain}/venv/lib/site-packages"], calls
    assert calls.index(compiles[0]) > max(i for i, c in enumerate(calls) if c.startswith("uv pip install"))
    excepted = tmp_path / "excepted"
    excepted.mkdir()
    calls = _run(excepted, uv_version=UV_PIN, options=("--compile-except", "/transformers/models/"))
    assert [c for c in calls if "-m compileall" in c] == \
        [f"python -m compileall -q -j 0 -x /transformers/models/ {excepted}/venv/lib/site-packages"], calls


def test_no_compile_leaves_the_byte_code_to_the_first_import(tmp_path):
    calls = _run(tmp_path, uv_version=UV_PIN, options=("--no-compile",))
    assert len([c for c in calls if c.startswith("uv pip install")]) == 1, calls
    assert not [c for c in calls if "compileall" in c], calls
