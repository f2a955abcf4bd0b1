"""earlyoom's arguments: the seed's 8 GiB line in KiB (-M only, so earlyoom does not take
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
    assert "sparklab_engine" in args and "sshd" in args.split("--avoid", 1)[1]


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
