"""Architecture -> (module, class): the stand-in engine's registry.py as the lab's plugin
ships it (LAB-ONLY). Identical to the engine's, plus the plugin's architecture, the way
seed 004's solar_open2 plugin replaces vLLM's registry.py."""

import importlib

_MODELS = {
    "SparklabTinyForCausalLM": ("sparklab_engine.models.tiny", "SparklabTinyForCausalLM"),
    # Added by the plugin (models/standin.py comes with it).
    "SparklabStandinForCausalLM": ("sparklab_engine.models.standin", "SparklabStandinForCausalLM"),
}


def get_supported_archs():
    return sorted(_MODELS)


def load_model_class(architecture):
    module_name, class_name = _MODELS[architecture]
    return getattr(importlib.import_module(module_name), class_name)
