# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where runs leave their reports and the deployment history on the control node.

One rule for both readers: the playbooks (the spark role's spark_report_dir and
spark_deployment_dir, through the report_dir and deployment_dir filters) and the wrapper
(sparkctl/project.py, report_dir and deployment_dir) call these, so the wrapper reads the
reports and the history where the playbooks wrote them.

$SPARKCTL_REPORT_DIR names the report directory; without it, <project>/.sparkctl/reports.
$SPARKCTL_DEPLOYMENT_DIR names the base of the deployment history; without it, the report
directory's parent's deployments/. A relative one of either is taken from the directory the run
was started in (a playbook's tasks on the control node run in the playbook's directory, which
would otherwise put them under playbooks/). Each inventory keeps its history in a directory of
its own under the base (module_utils/deployment.py, inventory_key).

The values are joined as strings, not normalized: the playbooks have always rendered them this
way, and the wrapper hands the playbooks its report directory already absolute."""

from __future__ import annotations

import os

REPORT_DIR_ENV = "SPARKCTL_REPORT_DIR"
DEPLOYMENT_DIR_ENV = "SPARKCTL_DEPLOYMENT_DIR"
# Under the project when no variable names the report directory.
PROJECT_REPORTS = ".sparkctl/reports"
# Beside the report directory when no variable names the history's base.
DEPLOYMENTS = "deployments"


def report_dir(project, cwd, environ):
    """The report directory: environ's SPARKCTL_REPORT_DIR joined to cwd (an absolute one stays as
    it is), else <project>/.sparkctl/reports. A variable that is set but empty counts as set, as
    the ansible.builtin.env lookup the playbooks read it with had it."""
    override = environ.get(REPORT_DIR_ENV)
    return os.path.join(cwd, "%s/%s" % (project, PROJECT_REPORTS) if override is None else override)


def deployment_base(reports, cwd, environ):
    """The base directory of the deployment history: environ's SPARKCTL_DEPLOYMENT_DIR joined to
    cwd, else the deployments/ beside reports (the report directory as report_dir gave it, or as
    the inventory set spark_report_dir)."""
    override = environ.get(DEPLOYMENT_DIR_ENV)
    return os.path.join(cwd, "%s/%s" % (os.path.dirname(reports), DEPLOYMENTS) if override is None else override)
