"""earlyoom's arguments: the 8 GiB line (docs/field-notes.md) in KiB (-M only, so earlyoom does not take
the lower of it and its 10 % default), swap ignored, regexes checked before the file is
written (no whitespace or quotes: earlyoom.service splits $EARLYOOM_ARGS and keeps quotes)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.oom_guard import earlyoom_args


def test_seed_line_in_kib_with_prefer_and_avoid():
    assert earlyoom_args(8589934592, "^(vllm|python3?)$", "^(sshd|systemd)$") == (
        "-M 8388608 -s 100 -r 3600 --prefer ^(vllm|python3?)$ --avoid ^(sshd|systemd)$")


def test_bytes_round_up_to_whole_kib_and_strings_are_accepted():
    assert earlyoom_args("1048577").startswith("-M 1025 ")


def test_role_defaults_compile():
    import yaml
    from pathlib import Path

    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/oom_guard/defaults/main.yml").read_text())
    args = earlyoom_args(defaults["oom_guard_min_available_bytes"], defaults["oom_guard_prefer"], defaults["oom_guard_avoid"])
    assert "sparklab[-_]engine" in args and "sshd" in args.split("--avoid", 1)[1]


@pytest.mark.parametrize("value, match", [
    ("8G", "must be bytes"),
    (1024, "below 1 MiB"),
])
def test_bad_sizes_are_refused(value, match):
    with pytest.raises(AnsibleFilterError, match=match):
        earlyoom_args(value)


@pytest.mark.parametrize("regex, match", [
    ("^(vllm|py thon)$", "without whitespace"),
    ("'^vllm$'", "without whitespace, quotes"),
    ("^(vllm$", "not a valid regular expression"),
])
def test_bad_regexes_are_refused(regex, match):
    with pytest.raises(AnsibleFilterError, match=match):
        earlyoom_args(8589934592, regex)


def test_extra_arguments_are_single_words():
    assert earlyoom_args(8589934592, extra=["-n"]).endswith(" -n")
    with pytest.raises(AnsibleFilterError, match="one word per item"):
        earlyoom_args(8589934592, extra=["-p -n"])


# -- whom the default prefers ----------------------------------------------------------------
# earlyoom compiles --prefer with POSIX regcomp(REG_EXTENDED | REG_NOSUB) and runs regexec on
# /proc/PID/comm: the first 15 bytes of the process name (the executed file's name, or what the
# process set with prctl(PR_SET_NAME), which setproctitle does). The table gives full names;
# _comm() cuts them as the kernel does.

REG_EXTENDED, REG_NOSUB = 1, 8  # glibc's values


def _comm(name):
    return name.encode()[:15].decode()


def _posix_matcher(pattern):
    """regexec as earlyoom calls it (glibc through ctypes), else Python's re (same result for
    the default's syntax: anchors, groups, alternation, classes, `.*`)."""
    import ctypes
    import ctypes.util
    import re

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        regcomp, regexec = libc.regcomp, libc.regexec
    except (OSError, AttributeError):
        return lambda name: re.search(pattern, name) is not None
    compiled = ctypes.create_string_buffer(1024)  # larger than any libc's regex_t
    assert regcomp(compiled, pattern.encode(), REG_EXTENDED | REG_NOSUB) == 0, pattern
    return lambda name: regexec(compiled, name.encode(), 0, None, 0) == 0


PREFERRED = [
    "vllm",                     # `vllm serve` (venv entry point, and the NGC image's)
    "VLLM::APIServer",          # vLLM's processes name themselves VLLM::<role> (setproctitle)
    "VLLM::EngineCore",
    "VLLM::EngineCore_DP0",
    "VLLM::Worker_TP0",
    "VLLM::Worker_TP1_EP1",
    "ray::RayWorkerWrapper",    # vLLM's tensor-parallel ranks on Ray
    "ray::RayWorkerWrapper.execute_method",
    "sglang",
    "sglang::scheduler_TP0",    # SGLang's ranks: they hold the weights and the KV cache
    "sglang::scheduler_DP0_TP1",
    "sglang::detokenizer",
    "sparklab-engine",          # the lab's stand-in engine
    "sparklab_engine",          # the lab's memory hog named like it
]

SPARED = [
    "python3",          # Ansible's modules (AnsiballZ) and the checkpoint download run as python
    "python",
    "python3.12",
    "python3.11",
    "hf",
    "rsync",
    "sshd",
    "ray",              # `ray start --block`, the unit's main process
    "raylet",
    "gcs_server",
    "ray::IDLE",        # Ray's pooled workers, not the engine
    "ray::DashboardAgent",   # fate-shares with the raylet: killing it takes the node out of Ray
    "ray::RuntimeEnvAgent",
    "nginx",
    "earlyoom",
    "systemd",
    "sh",
    "docker",
    "containerd-shim-runc-v2",
    "vllm-helper",
    "myvllm",
    "pythonvllm",
]


def _default(name):
    import yaml
    from pathlib import Path

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/oom_guard/defaults/main.yml").read_text())[name]


@pytest.mark.parametrize("name", PREFERRED)
def test_default_prefer_matches_the_engines_processes(name):
    assert _posix_matcher(_default("oom_guard_prefer"))(_comm(name)), _comm(name)


@pytest.mark.parametrize("name", SPARED)
def test_default_prefer_spares_ansible_the_transfer_and_ray(name):
    assert not _posix_matcher(_default("oom_guard_prefer"))(_comm(name)), _comm(name)


@pytest.mark.parametrize("name", ["sshd", "systemd", "systemd-journald", "dbus-daemon", "earlyoom", "gcs_server", "raylet"])
def test_default_avoid_keeps_the_way_in_and_rays_core(name):
    assert _posix_matcher(_default("oom_guard_avoid"))(_comm(name))
