import pytest
from ansible_collections.sparkctl.spark.plugins.test.apt_unresolved_in_check import apt_unresolved_in_check

UNKNOWN = {"failed": True, "changed": False, "msg": "No package matching 'earlyoom' is available"}


def test_a_package_the_stale_lists_do_not_know_is_a_change_in_check_mode():
    assert apt_unresolved_in_check(UNKNOWN, True)


@pytest.mark.parametrize(
    "result",
    [
        {"failed": False, "changed": True},
        {"changed": False},
        {"failed": True, "msg": "Failed to lock apt for exclusive operation: Failed to lock directory /var/lib/apt/lists/"},
        {"failed": True, "msg": "'/usr/bin/apt-get -y install earlyoom' failed: E: Unable to fetch some archives"},
        {"failed": True, "msg": "No package matching 'earlyoom' is available; also something else"},
        None,
        "No package matching 'earlyoom' is available",
    ],
)
def test_any_other_result_is_not(result):
    assert not apt_unresolved_in_check(result, True)


def test_a_real_run_never_hides_an_unknown_package():
    assert not apt_unresolved_in_check(UNKNOWN, False)
