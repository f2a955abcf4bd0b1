"""logind_setting resolves a logind.conf key the way systemd-logind does: main file,
then drop-ins by file name with /etc masking /usr/lib, last assignment wins."""

import base64

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter.logind_setting import (
    assignments,
    logind_setting,
    order_files,
    parse_systemd_boolean,
)

# Debian 12 / Ubuntu 24.04 ship the main file with every setting commented out.
STOCK_MAIN = """#  This file is part of systemd.
[Login]
#NAutoVTs=6
#KillUserProcesses=no
#RemoveIPC=yes
#InhibitDelayMaxSec=5
"""


def _file(path, text):
    return {"path": path, "content": text}


def _slurp(path, text):
    return {"source": path, "content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def test_stock_config_gives_the_default():
    files = [_file("/etc/systemd/logind.conf", STOCK_MAIN)]
    assert logind_setting(files, "RemoveIPC", "yes") == "yes"
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is True


def test_no_file_at_all_gives_the_default_with_its_source():
    assert logind_setting([], "RemoveIPC", "yes", with_source=True) == {"value": "yes", "source": "default", "raw": None}


def test_main_file_sets_the_key():
    files = [_file("/etc/systemd/logind.conf", "[Login]\nRemoveIPC=no\n")]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is False


def test_dropin_overrides_main_file_whatever_the_list_order():
    files = [
        _file("/etc/systemd/logind.conf.d/50-ipc.conf", "[Login]\nRemoveIPC=yes\n"),
        _file("/etc/systemd/logind.conf", "[Login]\nRemoveIPC=no\n"),
    ]
    result = logind_setting(files, "RemoveIPC", "yes", with_source=True)
    assert result == {"value": "yes", "source": "/etc/systemd/logind.conf.d/50-ipc.conf", "raw": "RemoveIPC=yes"}


def test_dropins_apply_in_file_name_order_across_directories():
    files = [
        _file("/etc/systemd/logind.conf.d/10-first.conf", "[Login]\nRemoveIPC=no\n"),
        _file("/usr/lib/systemd/logind.conf.d/90-vendor.conf", "[Login]\nRemoveIPC=yes\n"),
        _file("/run/systemd/logind.conf.d/50-middle.conf", "[Login]\nRemoveIPC=no\n"),
    ]
    # 90-vendor.conf sorts last, so it wins although it lives in /usr/lib.
    assert [p for p, _ in order_files(files)] == [
        "/etc/systemd/logind.conf.d/10-first.conf",
        "/run/systemd/logind.conf.d/50-middle.conf",
        "/usr/lib/systemd/logind.conf.d/90-vendor.conf",
    ]
    assert logind_setting(files, "RemoveIPC", "yes") == "yes"


def test_etc_dropin_masks_the_vendor_one_of_the_same_name():
    files = [
        _file("/usr/lib/systemd/logind.conf.d/50-ipc.conf", "[Login]\nRemoveIPC=yes\n"),
        _file("/etc/systemd/logind.conf.d/50-ipc.conf", "[Login]\nRemoveIPC=no\n"),
    ]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is False


def test_empty_etc_dropin_masks_without_setting_anything():
    files = [
        _file("/etc/systemd/logind.conf", "[Login]\nRemoveIPC=no\n"),
        _file("/usr/lib/systemd/logind.conf.d/50-ipc.conf", "[Login]\nRemoveIPC=yes\n"),
        _file("/etc/systemd/logind.conf.d/50-ipc.conf", ""),  # a link to /dev/null reads empty
    ]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is False


def test_only_the_highest_priority_main_file_is_read():
    files = [
        _file("/usr/lib/systemd/logind.conf", "[Login]\nRemoveIPC=no\n"),
        _file("/etc/systemd/logind.conf", STOCK_MAIN),
    ]
    assert logind_setting(files, "RemoveIPC", "yes") == "yes"


def test_last_assignment_in_a_file_wins_and_empty_resets():
    text = "[Login]\nRemoveIPC=no\nRemoveIPC=\n"
    assert logind_setting([text], "RemoveIPC", "yes", with_source=True) == {"value": "yes", "source": "<text 0>", "raw": "RemoveIPC="}
    assert logind_setting(["[Login]\nRemoveIPC=\nRemoveIPC=off\n"], "RemoveIPC", "yes", boolean=True) is False


def test_plain_texts_apply_in_list_order():
    assert logind_setting(["[Login]\nRemoveIPC=no\n", "[Login]\nRemoveIPC=yes\n"], "RemoveIPC", "x") == "yes"


def test_other_sections_comments_and_case_are_respected():
    text = """
[Other]
RemoveIPC=no
[Login]
# RemoveIPC=no
; RemoveIPC=no
removeipc=no
KillUserProcesses = yes
"""
    assert logind_setting([text], "RemoveIPC", "yes") == "yes"
    assert logind_setting([text], "KillUserProcesses", "no") == "yes"


def test_assignment_outside_a_section_is_ignored():
    assert logind_setting(["RemoveIPC=no\n"], "RemoveIPC", "yes") == "yes"


def test_invalid_boolean_is_ignored_like_logind_does():
    files = ["[Login]\nRemoveIPC=no\n", "[Login]\nRemoveIPC=maybe\n"]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is False
    # As a string the last assignment is reported verbatim.
    assert logind_setting(files, "RemoveIPC", "yes") == "maybe"


def test_slurp_results_are_decoded():
    files = [_slurp("/etc/systemd/logind.conf", STOCK_MAIN), _slurp("/etc/systemd/logind.conf.d/ray.conf", "[Login]\nRemoveIPC=no\n")]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True) is False


def test_line_continuation_and_quotes():
    text = '[Login]\nRemoveIPC=\\\nno\nKillExcludeUsers="root"\n'
    assert list(assignments(text)) == [("RemoveIPC", "no"), ("KillExcludeUsers", "root")]


def test_crlf_and_whitespace():
    assert logind_setting(["[Login]\r\n  RemoveIPC =  no  \r\n"], "RemoveIPC", "yes") == "no"


@pytest.mark.parametrize(
    "word,value", [("yes", True), ("On", True), ("1", True), ("t", True), ("no", False), ("OFF", False), ("0", False), ("maybe", None)]
)
def test_systemd_booleans(word, value):
    assert parse_systemd_boolean(word) is value


def test_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError):
        logind_setting("not a list", "RemoveIPC", "yes")
    with pytest.raises(AnsibleFilterError):
        logind_setting([{"path": "/etc/systemd/logind.conf"}], "RemoveIPC", "yes")
    with pytest.raises(AnsibleFilterError):
        logind_setting([], "RemoveIPC", "perhaps", boolean=True)


def test_custom_config_dirs_set_the_priority():
    files = [
        _file("/opt/a/logind.conf.d/50-x.conf", "[Login]\nRemoveIPC=no\n"),
        _file("/opt/b/logind.conf.d/50-x.conf", "[Login]\nRemoveIPC=yes\n"),
    ]
    assert logind_setting(files, "RemoveIPC", "yes", boolean=True, config_dirs=["/opt/a", "/opt/b"]) is False
    assert logind_setting(files, "RemoveIPC", "no", boolean=True, config_dirs=["/opt/b/", "/opt/a"]) is True
