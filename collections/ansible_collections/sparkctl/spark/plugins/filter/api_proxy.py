# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API proxy (nginx in front of the engine, the key required on every route but /health)
for playbooks: its configuration, unit and validate commands, and the include holding the key."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.plugin_utils import api_proxy
from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as profiles

DOCUMENTATION = r"""
name: api_proxy_render
short_description: Render the sparkctl API proxy (nginx) for a model profile
version_added: 0.1.0
description:
  - "Renders nginx's own configuration for C(sparkctl-api-proxy.service) (listening on the profile's public
    C(api.bind):C(api.port), proxying to the engine on C(127.0.0.1:api.engine_port); C(/health) without a key,
    every other route only with C(Authorization: Bearer <key>), else 401 with an OpenAI-shaped JSON error; streams
    unbuffered), the unit, and the C(validate:) commands for the configuration and the key include."
  - "Companion filter C(api_proxy_key_include) takes the text of the engine's API key file (C(VLLM_API_KEY=KEY),
    C(api-key: KEY) or the key alone) and returns the root-only include holding the key. Its errors never quote
    the key."
options:
  _input:
    description: The resolved model profile (C(spark_profile)).
    type: dict
    required: true
  cluster:
    description: The cluster description (C(spark_cluster)); unused today, kept for symmetry with C(profile_render).
    type: dict
    default: {}
  options:
    description: Overrides of the defaults in C(plugin_utils/api_proxy.py) (paths, worker user and count, connections
      per worker, body size, timeouts, per-client limits C(max_connections_per_client),
      C(requests_per_second_per_client) and C(request_burst_per_client), 0 turning the first two off).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Render the proxy
  ansible.builtin.set_fact:
    api_proxy_rendered: "{{ spark_profile | sparkctl.spark.api_proxy_render(spark_cluster, {'worker_processes': 4}) }}"

- name: Write the key include
  ansible.builtin.copy:
    content: "{{ key_file.content | b64decode | sparkctl.spark.api_proxy_key_include }}"
    dest: /etc/sparkctl/nginx-api-key.conf
    mode: "0600"
  no_log: true
"""

RETURN = r"""
_value:
  description:
    - C(api_proxy_render) returns C(config), C(unit) (texts), C(unit_name), C(listen) and C(upstream) (C({bind, port})),
      C(read_timeout_s) and C(validate) (C(config) and C(key_include), commands with C(%s)).
    - C(api_proxy_key_include) returns the include's text.
  type: raw
"""


def api_proxy_render(profile, cluster=None, options=None):
    problems = profiles.profile_problems(profile)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    try:
        return api_proxy.render(profile, cluster or {}, dict(options or {}))
    except api_proxy.ApiProxyError as exc:
        raise AnsibleFilterError(str(exc)) from None


def api_proxy_key_include(key_file_text):
    try:
        return api_proxy.key_include_from_file_text(key_file_text)
    except api_proxy.ApiProxyError as exc:
        # `from None`: the traceback must not carry the key file's text.
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"api_proxy_render": api_proxy_render, "api_proxy_key_include": api_proxy_key_include}
