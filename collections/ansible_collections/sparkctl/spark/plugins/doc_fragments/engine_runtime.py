# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the modules that read the engine runtime's versions (runtime_versions,
verify_facts): module_utils/runtime_versions.py's RUNTIME_ARGUMENT_SPEC, documented once."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  runtime_kind:
    description: The profile's C(runtime.kind).
    type: str
    required: true
    choices: [venv, image]
  venv_path:
    description: The engine's virtual environment. Required with O(runtime_kind=venv).
    type: path
  packages:
    description:
      - Distributions whose versions the module reports under C(packages), as names or pinned specs
        (C(vllm==0.25.1)); the name part is used, as given.
      - Typically the profile's C(runtime.venv.packages) plus C(torch).
    type: list
    elements: str
    default: []
  image:
    description: The engine image (a reference or an id) for O(runtime_kind=image). Required then.
    type: str
  image_nccl_version:
    description: The NCCL version the image ships (the profile's C(runtime.image.nccl_version)), reported when no preload is used.
    type: str
  image_container:
    description:
      - The engine's running container for O(runtime_kind=image) (e.g. C(sparkctl-ray-head)). When given, Python, torch
        and O(packages) are read with the image's own C(python3) inside it (C(docker exec)), as an image names no versions
        of its own. A container that does not run is a line of RV(problems), not an error.
    type: str
  nccl_preload:
    description: The profile's C(nccl.preload).
    type: dict
    suboptions:
      version:
        description: The declared NCCL version of the library.
        type: str
      path:
        description: The library on the node (C(/opt/sparkctl/nccl-2.30.7/lib/libnccl.so.2)). Empty means no preload.
        type: str
  nvidia_smi:
    description: Name or absolute path of C(nvidia-smi); a name is looked up in E(PATH), C(/usr/bin) and C(/usr/local/bin).
    type: str
    default: nvidia-smi
  docker:
    description: Name or absolute path of the C(docker) client, for O(runtime_kind=image).
    type: str
    default: docker
"""
