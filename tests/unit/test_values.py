"""module_utils/values.py: the reading gpu.py (nvidia-smi's index) and sysfs_net.py (a netdev's mtu) share."""

import pytest
from ansible_collections.sparkctl.spark.plugins.module_utils.values import int_or_none


@pytest.mark.parametrize("value, expected", [("9000", 9000), (" 0\n", 0), ("-1", -1), (None, None), ("", None),
                                             ("[N/A]", None), ("1.5", None)])
def test_int_or_none(value, expected):
    assert int_or_none(value) == expected
