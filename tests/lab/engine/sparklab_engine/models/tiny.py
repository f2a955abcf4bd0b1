"""The engine's one built-in architecture (a stand-in: it computes nothing)."""


class SparklabTinyForCausalLM:
    architecture = "SparklabTinyForCausalLM"
