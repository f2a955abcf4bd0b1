# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options shared by the modules that read network and RDMA sysfs."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  sysfs_root:
    description:
      - Directory that holds C(class/net).
    type: path
    default: /sys
  rdma_sysfs_root:
    description:
      - Directory that holds C(class/infiniband) and C(class/net/<if>/device/infiniband) (absent for a bond or VLAN,
        whose RDMA device is found through C(class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs)).
      - Defaults to O(sysfs_root). Test labs point it at a fixture tree, since containers have no RDMA devices.
    type: path
"""
