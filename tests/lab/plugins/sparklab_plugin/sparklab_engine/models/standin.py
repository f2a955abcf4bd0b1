"""The lab plugin's model (LAB-ONLY): the architecture of the lab's checkpoint
(tests/lab/profiles/lab-standin.yml, model.architecture). It computes nothing."""


class SparklabStandinForCausalLM:
    architecture = "SparklabStandinForCausalLM"
