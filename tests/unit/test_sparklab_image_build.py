"""The lab's node image build stopped half-way (tests/suite.sh builds it in the background beside
the venv's set-up and stops its background chains when a stage fails): SIGTERM must end the tool
through its clean-ups, so no root file system is left under the build's work directory and no
mmdebstrap keeps running. Docker and mmdebstrap are fakes here: nothing is built or mounted."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs sparklab's own entry point with the image missing, docker answering, and an mmdebstrap
# that makes the root file system's directory, says it started, and then waits to be stopped.
CHILD = textwrap.dedent("""
    import sys, tempfile
    sys.path.insert(0, sys.argv[1])
    import sparklab
    work_parent, lab_dir = sys.argv[2], sys.argv[3]
    real_mkdtemp = tempfile.mkdtemp
    sparklab.tempfile.mkdtemp = lambda prefix, dir: real_mkdtemp(prefix=prefix, dir=work_parent)
    sparklab.LAB_DIR = sparklab.Path(lab_dir)
    sparklab.os.geteuid = lambda: 0
    sparklab.check_docker = lambda: None
    sparklab.image_exists = lambda h: False
    sparklab.debian_mirror = lambda: "http://127.0.0.1:9/debian"
    sys.exit(sparklab.main(["image"]))
""")

FAKE_BOOTSTRAP = textwrap.dedent("""\
    #!/bin/sh
    # mmdebstrap OPTIONS... SUITE TARGET MIRROR
    eval target=\\${$(($# - 1))}
    mkdir -p "$target/proc"
    echo $$ > "$FAKE_BOOTSTRAP_PID"
    exec sleep 60
""")


def test_a_stopped_image_build_removes_its_work_directory(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mmdebstrap"
    fake.write_text(FAKE_BOOTSTRAP)
    fake.chmod(0o755)
    work_parent = tmp_path / "work"
    work_parent.mkdir()
    started = tmp_path / "mmdebstrap.pid"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_BOOTSTRAP_PID=str(started))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO / "tests" / "lab"), str(work_parent),
                              str(tmp_path / ".lab")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    bootstrap_pid = None
    try:
        deadline = time.monotonic() + 30
        while not (started.is_file() and started.read_text().strip()):
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < deadline, "the fake mmdebstrap never started"
            time.sleep(0.05)
        bootstrap_pid = int(started.read_text())
        assert [p.name for p in work_parent.iterdir()], "the build made no work directory"
        child.send_signal(signal.SIGTERM)
        output = child.communicate(timeout=30)[0]
        assert child.returncode == 128 + signal.SIGTERM, output
        assert list(work_parent.iterdir()) == [], "the stopped build left its work directory"
        assert not Path(f"/proc/{bootstrap_pid}").exists(), "mmdebstrap still runs"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if bootstrap_pid and Path(f"/proc/{bootstrap_pid}").exists():
            os.kill(bootstrap_pid, signal.SIGKILL)
