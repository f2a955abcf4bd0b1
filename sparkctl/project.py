"""Where the playbooks live and where runs leave their reports.

The playbooks come from one of two places: a checkout of the repository (site.yml,
playbooks/ and ansible.cfg at its top), or the sparkctl.spark collection installed with
`ansible-galaxy collection install` (playbooks/ inside it and config/ansible.cfg, the
configuration the collection's README tells users to run it with). A checkout keeps the
runs' reports in its own .sparkctl/; with an installed collection they go under the
directory the command was started from, never into the installed collection."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The stages `sparkctl up` runs, in their order (sparkctl/stages.py), relative to the root.
SITE = Path("playbooks") / "site.yml"
# The collection's place under a collection path, as Ansible's collection finder looks it up.
COLLECTION = Path("ansible_collections") / "sparkctl" / "spark"
# The Ansible configuration an installed collection ships (a checkout's is its top-level ansible.cfg).
COLLECTION_CONFIG = Path("config") / "ansible.cfg"


def is_checkout(root: Path) -> bool:
    """A repository checkout: the top-level site.yml and ansible.cfg beside playbooks/."""
    return (root / "site.yml").is_file() and (root / "ansible.cfg").is_file() and (root / SITE).is_file()


def collection_search_paths() -> list[Path]:
    """Where Ansible's collection finder looks for collections, in its order: the configured
    collection paths (ANSIBLE_COLLECTIONS_PATH, or collections_path in the ansible.cfg of
    the current directory, or ~/.ansible/collections and the system ones), then sys.path
    (a collection installed into the Python environment)."""
    from ansible import constants

    return [Path(path).expanduser() for path in [*constants.COLLECTIONS_PATHS, *sys.path] if path]


def installed_collection(search_paths: list[Path] | None = None) -> Path | None:
    """The installed sparkctl.spark collection holding the playbooks, or None."""
    for base in collection_search_paths() if search_paths is None else search_paths:
        candidate = base / COLLECTION
        if (candidate / SITE).is_file() and (candidate / COLLECTION_CONFIG).is_file():
            return candidate
    return None


def project_dir() -> Path:
    """The directory holding the playbooks: $SPARKCTL_PROJECT, else the checkout the package
    was installed from (pip install -e), else the installed sparkctl.spark collection."""
    override = os.environ.get("SPARKCTL_PROJECT")
    if override:
        root = Path(override)
        if not (root / SITE).is_file():
            raise SystemExit(f"sparkctl: no {SITE} in {root}; set SPARKCTL_PROJECT to a sparkctl checkout "
                             "or an installed sparkctl.spark collection.")
        return root
    checkout = Path(__file__).resolve().parents[1]
    if is_checkout(checkout):
        return checkout
    installed = installed_collection()
    if installed is None:
        raise SystemExit("sparkctl: no playbooks found: install the collection "
                         "(`ansible-galaxy collection install sparkctl-spark-<version>.tar.gz`, or set "
                         "ANSIBLE_COLLECTIONS_PATH to where it is installed), or set SPARKCTL_PROJECT to a checkout.")
    return installed


def collection_importable(root: Path) -> None:
    """Make the collection's Python (ansible_collections.sparkctl.spark) importable, from a checkout
    or an installed collection: the wrapper reads the values the collection owns from it."""
    base = root / "collections" if is_checkout(root) else collections_path(root)
    if base is not None and (base / COLLECTION).is_dir() and str(base) not in sys.path:
        sys.path.insert(0, str(base))


def config_file(root: Path) -> Path:
    """The ansible.cfg the playbooks run with: a checkout's own, else the collection's."""
    return root / "ansible.cfg" if (root / "ansible.cfg").is_file() else root / COLLECTION_CONFIG


def collections_path(root: Path) -> Path | None:
    """For an installed collection, the collection path holding it (so ansible-playbook finds
    it whichever way the wrapper did); None for a checkout, whose ansible.cfg names its own."""
    if root.parts[-3:] == COLLECTION.parts and not (root / "ansible.cfg").is_file():
        return root.parents[2]
    return None


def state_dir(root: Path) -> Path:
    """Where .sparkctl/ (reports, deployments, runner artifacts) goes by default: a checkout's
    own directory, else the directory the command was started from."""
    return root if is_checkout(root) else Path.cwd()


def _report_dirs():
    """The collection's rule for the report and history directories (plugin_utils/report_dirs.py,
    which the spark role's spark_report_dir and spark_deployment_dir follow too). The caller made
    the collection importable (collection_importable)."""
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import report_dirs

    return report_dirs


def report_dir(root: Path) -> Path:
    """Where the playbooks write their reports (spark_report_dir), by the collection's rule for
    the project's state directory: $SPARKCTL_REPORT_DIR, a relative one from the current
    directory, else <state directory>/.sparkctl/reports. Absolute, so the playbooks, which run
    elsewhere and are given it (sparkctl/runner.py), write where the wrapper reads."""
    return Path(_report_dirs().report_dir(str(state_dir(root)), os.getcwd(), os.environ))


def deployment_dir(root: Path) -> Path:
    """The base of the deployment history (spark_deployment_dir without its inventory's directory),
    by the collection's rule: $SPARKCTL_DEPLOYMENT_DIR, a relative one from the current directory,
    else the deployments/ beside the report directory the playbooks are given (report_dir)."""
    return Path(_report_dirs().deployment_base(str(report_dir(root)), os.getcwd(), os.environ))
