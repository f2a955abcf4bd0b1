# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The names of the systemd units sparkctl runs, defined here once.

The profile's renderer, the API proxy's unit, the firewall's start check and revert timer
read them here; roles and playbooks read them as spark_units (roles/spark/defaults/main.yml,
through the profile_units filter). It lives in module_utils because modules import only
from there.
"""

from __future__ import annotations

RSYNCD_SOCKET = "sparkctl-rsyncd.socket"


def unit_stem(name):
    """'sparkctl-ray-head.service' -> 'sparkctl-ray-head': what systemd-run --unit= and a
    unit's docker container are named."""
    return str(name).rsplit(".", 1)[0]


UNITS = {
    # Ray (vLLM-on-Ray profiles): the head, and one on every worker.
    "ray_head": "sparkctl-ray-head.service",
    "ray_worker": "sparkctl-ray-worker.service",
    # The engine's API server on the head (vLLM-on-Ray profiles).
    "engine": "sparkctl-engine.service",
    # vLLM's own multi-node launch (topology vllm_ranks): the engine unit on the head is rank 0
    # and the API server, this one the headless rank on every worker.
    "vllm_rank": "sparkctl-vllm-rank.service",
    # SGLang profiles: one rank on every node, the router (the API) on the head.
    "sglang_rank": "sparkctl-sglang-rank.service",
    "sglang_router": "sparkctl-sglang-router.service",
    # nginx in front of the engine on the head.
    "api_proxy": "sparkctl-api-proxy.service",
    # The host firewall, and the transient timer that puts a previous table back.
    "firewall": "sparkctl-firewall.service",
    "firewall_revert": "sparkctl-firewall-revert.timer",
    # The checkpoint mirror's daemon on the workers: with Accept=yes, systemd starts one
    # instance of <socket name>@.service per connection, so that name follows the socket's.
    "rsyncd_socket": RSYNCD_SOCKET,
    "rsyncd": f"{unit_stem(RSYNCD_SOCKET)}@.service",
}

# The engine's units of every topology, the API before the ranks (the order a stop takes them in:
# no rank goes while its API still serves), and Ray's, the workers before the head (no worker sees
# its head vanish while it runs). Every playbook and role that stops, lists or tears down "the
# engine" reads these (unit_groups), so a new topology's unit is named here once.
ENGINE_UNIT_KEYS = ("sglang_router", "engine", "vllm_rank", "sglang_rank")
RAY_UNIT_KEYS = ("ray_worker", "ray_head")


def unit_groups():
    """{"engine": [...], "ray": [...]}: the names of ENGINE_UNIT_KEYS and RAY_UNIT_KEYS, in their order."""
    return {"engine": [UNITS[key] for key in ENGINE_UNIT_KEYS], "ray": [UNITS[key] for key in RAY_UNIT_KEYS]}
