"""Architecture -> (module, class), the shape of vLLM's model_executor/models/registry.py.

The lab's out-of-tree plugin replaces this file to add its architecture, the way seed
004's solar_open2 plugin replaces vLLM's registry.py."""

import importlib

_MODELS = {
    "SparklabTinyForCausalLM": ("sparklab_engine.models.tiny", "SparklabTinyForCausalLM"),
}


def get_supported_archs():
    return sorted(_MODELS)


def load_model_class(architecture):
    module_name, class_name = _MODELS[architecture]
    return getattr(importlib.import_module(module_name), class_name)
