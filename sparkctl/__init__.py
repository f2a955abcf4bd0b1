"""sparkctl: a thin wrapper over the project's Ansible playbooks."""

__version__ = "0.1.0"
