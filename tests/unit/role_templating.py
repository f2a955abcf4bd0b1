"""A role variable's expression evaluated by Ansible's own templating (ansible-core 2.21 trusts
only marked strings as templates), for tests that judge what a role's vars compute."""
from __future__ import annotations


def evaluate(expr: str, variables: dict):
    """expr templated with variables; every string value among them is trusted as a template, as
    Ansible trusts the role's own vars and defaults files."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    trusted = {key: trust_as_template(value) if isinstance(value, str) else value for key, value in variables.items()}
    return Templar(loader=DataLoader(), variables=trusted).template(trust_as_template(expr))
