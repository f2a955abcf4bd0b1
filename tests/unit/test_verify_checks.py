"""Filters sparkctl.spark.version_parity and memory_headroom: the verify
stage's cross-node checks."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkctl.spark.plugins.filter import verify_checks as vc
from ansible_collections.sparkctl.spark.plugins.module_utils.runtime_versions import empty_versions

GIB = 1024 ** 3
GUARD = 8 * GIB
MARGIN = 4 * GIB


def venv_node(**changes):
    versions = empty_versions(["vllm", "torch"])
    versions.update(driver="580.95.05", cuda="13.0", nccl="2.30.7", nccl_source="preload", torch="2.11.0+cu130",
                    python="3.12.3", venv_lock_sha256="9f" * 32)
    versions["packages"] = {"vllm": "0.25.1", "torch": "2.11.0+cu130"}
    for key, value in changes.items():
        if key.startswith("packages."):
            versions["packages"][key[len("packages."):]] = value
        else:
            versions[key] = value
    return versions


def image_node(**changes):
    versions = empty_versions()
    versions.update(driver="580.95.05", cuda="13.0", image_id="sha256:" + "4f" * 32, image_context_hash=None)
    versions.update(changes)
    return versions


# --- version_parity ------------------------------------------------------------------------


def test_identical_nodes_pass_and_all_null_items_are_left_out():
    result = vc.version_parity({"spark1": venv_node(), "spark2": venv_node()})

    assert result["ok"] is True and result["mismatches"] == [] and result["table"] == ""
    assert [row["item"] for row in result["rows"]] == [
        "driver", "cuda", "nccl", "torch", "python", "venv_lock_sha256", "packages.vllm", "packages.torch"]
    assert all(row["same"] and row["checked"] for row in result["rows"])
    assert result["rows"][0]["values"] == {"spark1": "580.95.05", "spark2": "580.95.05"}


def test_a_different_driver_fails_with_a_table():
    result = vc.version_parity({"spark1": venv_node(), "spark2": venv_node(driver="580.82.07")})

    assert result["ok"] is False and result["mismatches"] == ["driver"]
    assert result["table"] == (
        "item   | spark1    | spark2\n"
        "-------+-----------+----------\n"
        "driver | 580.95.05 | 580.82.07"
    )


def test_null_on_one_node_and_set_on_the_other_is_a_mismatch():
    result = vc.version_parity({"spark1": venv_node(), "spark2": venv_node(torch=None, **{"packages.vllm": None})})

    assert result["mismatches"] == ["torch", "packages.vllm"]
    assert "torch         | 2.11.0+cu130 | -" in result["table"]


def test_several_mismatches_list_every_item_and_long_values_are_shortened():
    result = vc.version_parity({
        "spark1": venv_node(),
        "spark2": venv_node(nccl="2.28.9", nccl_source="venv", venv_lock_sha256="0a" * 32, **{"packages.vllm": "0.25.2"}),
    })

    assert result["mismatches"] == ["nccl", "venv_lock_sha256", "packages.vllm"]
    lines = result["table"].splitlines()
    assert lines[0].split(" | ") == ["item            ", "spark1                  ", "spark2"]
    assert lines[3] == "venv_lock_sha256 | 9f9f9f9f9f9f9f9f9f9f9... | 0a0a0a0a0a0a0a0a0a0a0..."
    assert len(lines) == 2 + 3


def test_all_true_tabulates_every_row_and_marks_the_differences():
    same = vc.version_parity({"a": venv_node(), "b": venv_node()}, all=True)
    different = vc.version_parity({"a": venv_node(), "b": venv_node(cuda="12.9")}, all=True)

    assert same["ok"] is True
    assert [line.split(" | ")[0].strip() for line in same["table"].splitlines()[2:]] == [row["item"] for row in same["rows"]]
    labels = [line.split(" | ")[0].strip() for line in different["table"].splitlines()[2:]]
    assert labels[:3] == ["driver", "cuda (differs)", "nccl"] and different["mismatches"] == ["cuda"]


def test_packages_of_every_host_are_compared_even_if_only_one_lists_them():
    one = venv_node()
    other = venv_node()
    other["packages"]["flashinfer-python"] = "0.5.3"

    result = vc.version_parity({"spark1": one, "spark2": other})

    assert result["mismatches"] == ["packages.flashinfer-python"]


def test_image_ids_of_per_node_builds_of_one_context_are_not_compared():
    same_context = vc.version_parity({
        "spark1": image_node(image_context_hash="ctx-1"),
        "spark2": image_node(image_id="sha256:" + "77" * 32, image_context_hash="ctx-1"),
    })
    other_context = vc.version_parity({
        "spark1": image_node(image_context_hash="ctx-1"),
        "spark2": image_node(image_id="sha256:" + "77" * 32, image_context_hash="ctx-2"),
    })
    pulled = vc.version_parity({"spark1": image_node(), "spark2": image_node(image_id="sha256:" + "77" * 32)})

    assert same_context["ok"] is True
    assert {row["item"]: row["checked"] for row in same_context["rows"]}["image_id"] is False
    assert other_context["mismatches"] == ["image_id", "image_context_hash"]
    assert pulled["mismatches"] == ["image_id"]


def test_ignored_items_are_shown_but_not_compared():
    result = vc.version_parity({"a": venv_node(), "b": venv_node(**{"packages.vllm": "0.25.2"})},
                               all=True, ignore=["packages.vllm"])

    assert result["ok"] is True
    assert "packages.vllm (not compared) | 0.25.1" in result["table"]


def test_a_single_node_and_no_nodes_pass():
    assert vc.version_parity({"spark1": venv_node()})["ok"] is True
    assert vc.version_parity({}) == {"ok": True, "rows": [], "mismatches": [], "table": ""}


def test_a_host_without_versions_is_all_null_and_mismatches():
    result = vc.version_parity({"spark1": image_node(), "spark2": None})

    assert result["mismatches"] == ["driver", "cuda", "image_id"]


def test_version_parity_refuses_a_list():
    with pytest.raises(AnsibleFilterError, match="expected {host: versions}"):
        vc.version_parity([venv_node()])


def test_the_input_is_not_modified():
    per_host = {"a": venv_node(), "b": venv_node(driver="1")}
    before = copy.deepcopy(per_host)

    vc.version_parity(per_host, all=True)

    assert per_host == before


# --- memory_headroom -----------------------------------------------------------------------


def test_headroom_ok_warn_and_fail_around_the_guard_line():
    per_host = {
        "spark1": {"MemAvailable": 20 * GIB, "MemTotal": 119 * GIB},
        "spark2": {"MemAvailable": GUARD + MARGIN, "MemTotal": 119 * GIB},
        "spark3": {"MemAvailable": GUARD, "MemTotal": 119 * GIB},
    }

    result = vc.memory_headroom(per_host, GUARD, MARGIN)

    assert result["ok"] is False and result["failed"] == ["spark3"] and result["warned"] == ["spark2"]
    assert [row["status"] for row in result["rows"]] == ["ok", "warn", "fail"]
    assert [row["margin_bytes"] for row in result["rows"]] == [12 * GIB, MARGIN, 0]
    assert result["rows"][0] == {
        "host": "spark1", "available_bytes": 20 * GIB, "total_bytes": 119 * GIB, "guard_bytes": GUARD,
        "margin_bytes": 12 * GIB, "status": "ok",
        "message": "spark1: MemAvailable 20.00 GiB of 119.00 GiB, 12.00 GiB above the OOM guard line of 8.00 GiB.",
    }
    assert result["rows"][1]["message"].startswith(
        "spark2: MemAvailable 12.00 GiB of 119.00 GiB is only 4.00 GiB above the OOM guard line of 8.00 GiB (warning within 4.00 GiB)")
    assert result["rows"][2]["message"].startswith(
        "spark3: MemAvailable 8.00 GiB of 119.00 GiB is at or below the OOM guard line of 8.00 GiB: the guard is about to kill")


def test_one_byte_over_the_margin_is_ok_and_one_byte_over_the_guard_warns():
    result = vc.memory_headroom({"a": {"MemAvailable": GUARD + MARGIN + 1}, "b": {"MemAvailable": GUARD + 1}}, GUARD, MARGIN)

    assert [row["status"] for row in result["rows"]] == ["ok", "warn"]
    assert result["ok"] is True and result["warned"] == ["b"]
    assert "of" not in result["rows"][0]["message"].split("GiB")[1]


def test_headroom_reads_proc_meminfo_names_and_host_facts_keys():
    by_name = {"MemAvailable": 118606228 * 1024, "MemTotal": 125489508 * 1024}
    from_facts = {"mem_available_bytes": 6 * GIB, "mem_total_bytes": 119 * GIB}

    result = vc.memory_headroom({"spark1": by_name, "spark2": from_facts}, GUARD, MARGIN)

    assert [row["status"] for row in result["rows"]] == ["ok", "fail"]
    assert result["rows"][0]["available_bytes"] == 118606228 * 1024
    assert result["rows"][1]["total_bytes"] == 119 * GIB


def test_unknown_memavailable_fails_that_host():
    result = vc.memory_headroom({"spark1": {"MemTotal": 119 * GIB}, "spark2": None}, GUARD, MARGIN)

    assert result["failed"] == ["spark1", "spark2"]
    assert result["rows"][0]["message"] == "spark1: MemAvailable could not be read from /proc/meminfo."


@pytest.mark.parametrize("guard, margin", [("8G", MARGIN), (GUARD, None), (-1, MARGIN), (GUARD, -5)])
def test_headroom_refuses_limits_that_are_not_byte_counts(guard, margin):
    with pytest.raises(AnsibleFilterError, match="must be byte counts"):
        vc.memory_headroom({"a": {"MemAvailable": GIB}}, guard, margin)


def test_the_filters_are_registered():
    filters = vc.FilterModule().filters()

    assert filters == {"version_parity": vc.version_parity, "memory_headroom": vc.memory_headroom}
