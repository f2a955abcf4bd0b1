"""A role variable's expression evaluated by Ansible's own templating (ansible-core 2.21 trusts
only marked strings as templates), for tests that judge what a role's vars compute."""
from __future__ import annotations


def _trusted(value):
    """value with every string in it, however deep in dicts and lists, trusted as a template: Ansible
    trusts the whole of a role's vars and defaults files and a task's vars, nested values included."""
    from ansible.template import trust_as_template
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def evaluate(expr: str, variables: dict):
    """expr templated with variables; every string value among them is trusted as a template, as
    Ansible trusts the role's own vars and defaults files."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    return Templar(loader=DataLoader(), variables=_trusted(variables)).template(trust_as_template(expr))
