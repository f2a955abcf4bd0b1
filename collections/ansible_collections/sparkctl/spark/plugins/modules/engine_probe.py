#!/usr/bin/python
# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_probe
short_description: Prove that the engine's OpenAI-compatible endpoint really serves
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sparkctl.spark.attributes.info_posix
description:
  - The verify stage's endpoint probe, run on the head node against the API on loopback. It sends real requests
    and returns one result per check; it does not fail on a failed check (the caller decides), only on bad
    parameters or an unusable key file.
  - "Checks, run in this order whatever the order of O(checks):
    V(health) C(GET /health) answers 200;
    V(auth) C(GET /v1/models) and C(POST /v1/completions) without the key answer 401 or 403, the routes outside
    C(/v1) in O(auth_routes) without the key answer 401, 403 or 404 (engines leave some open: the API proxy closes
    them), and C(/v1/models) with the key answers 200 and lists O(model);
    V(generation) a streamed completion of 8 tokens delivers its first token within O(generation_deadline) seconds
    (the wedge detection: C(/health) answering is not enough), with its time to first token;
    V(smoke) the profile's smoke prompt through its endpoint, not streamed, contains the expected text (case does
    not matter);
    V(chat) a chat completion returns a non-empty message (content or reasoning);
    V(reasoning) a chat answer carries its reasoning separately from the content, in C(message.reasoning_content)
    or C(message.reasoning);
    V(tools) a chat request with one tool (C(get_weather), a required string C(city)) and C(tool_choice=auto) returns structured
    C(tool_calls) naming the function, with JSON arguments holding C(city)."
  - "Skips: when nothing answers C(/health), every later check is skipped; when V(generation) finds the engine
    wedged (C(/health) answers, no token comes), V(smoke), V(chat), V(reasoning) and V(tools) are skipped, since each
    would only wait for O(request_timeout). V(smoke) is skipped when O(smoke) is not given. A skipped check counts
    neither as passed nor as failed."
  - HTTP errors, refused connections and timeouts become failed checks whose message carries the server's error
    text.
  - The API key is read from O(api_key_file) on the host; it is sent only in the C(Authorization) header and never
    appears in the result.
attributes:
  check_mode:
    details:
      - Probes exactly as in a normal run; it only reads (a generation changes nothing).
author:
  - sparkctl developers (!UNKNOWN)
options:
  url:
    description: The API's base URL, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  api_key_file:
    description:
      - "The file holding the API key, on the host the module runs on, as the serve stage writes it for the engine
        (vLLM's environment file C(VLLM_API_KEY=KEY), SGLang's config C(api-key: KEY)) or holding just the key."
      - Needed by every check but V(health); when it is missing or unreadable the module fails naming the path.
    type: path
    required: true
  model:
    description: The served model name (the profile's C(api.served_model_name)).
    type: str
    required: true
  smoke:
    description: The profile's C(smoke) section.
    type: dict
    suboptions:
      endpoint:
        description: V(completions) sends the prompt to C(/v1/completions), V(chat) as one user message to C(/v1/chat/completions).
        type: str
        choices: [completions, chat]
        default: completions
      prompt:
        description: The prompt.
        type: str
        required: true
      expect:
        description: Text the answer must contain (case does not matter).
        type: str
        required: true
      max_tokens:
        description: The token budget of the answer.
        type: int
        default: 16
      chat_template_kwargs:
        description: Sent with the smoke and V(chat) requests; also with V(reasoning), with C(enable_thinking) forced on when present.
        type: dict
  checks:
    description: The checks to run.
    type: list
    elements: str
    choices: [health, auth, smoke, chat, reasoning, tools, generation]
    default: [health, auth, smoke, chat, generation]
  tool_request_overrides:
    description: Merged (nested mappings key by key) into the V(tools) request; the profile's C(api.tool_request_overrides).
    type: dict
    default: {}
  generation_deadline:
    description: Seconds the V(generation) check waits for the first token (and between later tokens).
    type: float
    default: 60
  request_timeout:
    description: Seconds any other request may take.
    type: float
    default: 120
  auth_routes:
    description:
      - Routes outside C(/v1) the V(auth) check requests without the key, as C(GET /path) or C(POST /path) (a POST
        carries a 1-token completion body). Any answer but 401, 403 or 404 fails the check.
      - An empty list checks C(/v1) only (an engine without the API proxy in front, by choice).
    type: list
    elements: str
    default: [GET /version, GET /ping, GET /metrics, POST /tokenize, POST /invocations]
"""

EXAMPLES = r"""
- name: Probe the endpoint
  sparkctl.spark.engine_probe:
    url: "http://127.0.0.1:{{ profile.api.port }}"
    api_key_file: /etc/sparkctl/api-key.env
    model: "{{ profile.api.served_model_name }}"
    smoke: "{{ profile.smoke }}"
    checks: [health, auth, smoke, chat, generation, reasoning, tools]
    tool_request_overrides: "{{ profile.api.tool_request_overrides | default({}) }}"
    generation_deadline: 60
  register: endpoint_probe

- name: Fail with the checks that did not pass
  ansible.builtin.fail:
    msg: "{{ endpoint_probe.checks | selectattr('name', 'in', endpoint_probe.failed_checks) | map(attribute='message') | list }}"
  when: endpoint_probe.failed_checks | length > 0
"""

RETURN = r"""
checks:
  description: One result per requested check, in the order run.
  type: list
  elements: dict
  returned: always
  contains:
    name:
      description: The check.
      type: str
      sample: generation
    ok:
      description: Whether it passed (V(false) when skipped).
      type: bool
    skipped:
      description: Whether it was not run, and why is in RV(checks[].message).
      type: bool
    message:
      description: One line for a human, starting with the check's name.
      type: str
      sample: "generation: /health answers but no token arrived within 60 s: the engine is wedged
        (restart it: sparkctl serve, or systemctl restart sparkctl-engine)"
    seconds:
      description: How long the check took.
      type: float
    detail:
      description:
        - What the check saw, without secrets, e.g. C(http_status), C(answer), C(ttft_s), C(tokens), C(wedged),
          C(served_models), C(function), C(arguments).
      type: dict
  sample:
    - name: smoke
      ok: false
      skipped: false
      message: "smoke: expected 'Tokyo' in the answer to 'The capital of Japan is', got ' Kyoto.'"
      seconds: 0.21
      detail: {endpoint: completions, http_status: 200, answer: " Kyoto."}
failed_checks:
  description:
    - Names of the checks that ran and failed.
    - Not called C(failed), which Ansible would read as the task's own failure.
  type: list
  elements: str
  returned: always
  sample: [smoke]
skipped_checks:
  description: Names of the checks that were skipped.
  type: list
  elements: str
  returned: always
passed:
  description: How many checks passed.
  type: int
  returned: always
  sample: 4
summary:
  description: One line, e.g. how many passed and which failed.
  type: str
  returned: always
  sample: "4 of 5 checks passed; failed: smoke"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.engine_probe import (
    CHECK_ORDER,
    DEFAULT_CHECKS,
    OPEN_ROUTE_PROBES,
    KeyFileError,
    key_file_message,
    needs_key,
    ordered_checks,
    parse_base_url,
    parse_routes,
    read_api_key,
    run_checks,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key_file=dict(type="path", required=True),
            model=dict(type="str", required=True),
            smoke=dict(type="dict", options=dict(
                endpoint=dict(type="str", choices=["completions", "chat"], default="completions"),
                prompt=dict(type="str", required=True),
                expect=dict(type="str", required=True),
                max_tokens=dict(type="int", default=16, no_log=False),
                chat_template_kwargs=dict(type="dict"),
            )),
            checks=dict(type="list", elements="str", choices=list(CHECK_ORDER), default=list(DEFAULT_CHECKS)),
            tool_request_overrides=dict(type="dict", default={}),
            generation_deadline=dict(type="float", default=60.0),
            request_timeout=dict(type="float", default=120.0),
            auth_routes=dict(type="list", elements="str", default=list(OPEN_ROUTE_PROBES)),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        parse_base_url(params["url"])
        checks = ordered_checks(params["checks"])
        parse_routes(params["auth_routes"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    for name in ("generation_deadline", "request_timeout"):
        if params[name] <= 0:
            module.fail_json(msg="%s must be > 0, got %s" % (name, params[name]))

    api_key = None
    if needs_key(checks):
        try:
            api_key = read_api_key(params["api_key_file"])
        except KeyFileError as exc:
            module.fail_json(msg=key_file_message(exc, checks))
        # Ansible then masks the key in anything the module returns, should it ever slip into a message.
        module.no_log_values.add(api_key)

    try:
        result = run_checks(params["url"], api_key, params["model"], checks=checks, smoke=params["smoke"],
                            tool_request_overrides=params["tool_request_overrides"],
                            generation_deadline=params["generation_deadline"], request_timeout=params["request_timeout"],
                            auth_routes=params["auth_routes"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
