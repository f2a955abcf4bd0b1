# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the modules that ask the hub (hub_access, checkpoint_fit): module_utils/hub_access.py's
HUB_ARGUMENT_SPEC, documented once."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  token:
    description: Hugging Face token; empty asks anonymously.
    type: str
  endpoint:
    description: Hub URL. Empty uses C(HF_ENDPOINT) from the node's environment, else C(https://huggingface.co).
    type: str
"""
