"""Where the playbooks live and where runs leave their reports."""

from __future__ import annotations

import os
from pathlib import Path


def project_dir() -> Path:
    """The directory holding site.yml and ansible.cfg (the checkout the package was installed from)."""
    override = os.environ.get("SPARKCTL_PROJECT")
    root = Path(override) if override else Path(__file__).resolve().parents[1]
    if not (root / "site.yml").is_file():
        raise SystemExit(f"sparkctl: no site.yml in {root}; set SPARKCTL_PROJECT to the sparkctl checkout.")
    return root


def report_dir(root: Path) -> Path:
    """Matches spark_report_dir in roles/spark: SPARKCTL_REPORT_DIR (a relative one from the
    current directory, as the playbooks take it) or <project>/.sparkctl/reports. Absolute, so
    the playbooks, which run elsewhere, write where the wrapper reads."""
    override = os.environ.get("SPARKCTL_REPORT_DIR")
    return Path(override).absolute() if override else root / ".sparkctl" / "reports"


def deployment_dir(root: Path) -> Path:
    """Matches spark_deployment_dir in roles/spark: SPARKCTL_DEPLOYMENT_DIR (a relative one from
    the current directory) or the report directory's parent's deployments/."""
    override = os.environ.get("SPARKCTL_DEPLOYMENT_DIR")
    return Path(override).absolute() if override else report_dir(root).parent / "deployments"
