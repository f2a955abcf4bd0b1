"""The filters that build node_state's arguments, the API key file text both the read and
the write use (a difference would rewrite the key file on every run), and the key read back
out of such a file."""

from __future__ import annotations

import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkctl.spark.plugins.filter import api_key as ak
from ansible_collections.sparkctl.spark.plugins.filter import node_state as nsf
from ansible_collections.sparkctl.spark.plugins.module_utils.api_key import api_key_from_text


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def test_files_carry_the_checksum_of_their_content():
    entries = nsf.node_state_files({"a.service": "[Unit]\n", "b.service": ""}, "/etc/systemd/system",
                                   owner="root", group="root", mode="0644")
    assert entries == [
        {"path": "/etc/systemd/system/a.service", "checksum": sha1("[Unit]\n"), "owner": "root", "group": "root",
         "mode": "0644"},
        {"path": "/etc/systemd/system/b.service", "checksum": sha1(""), "owner": "root", "group": "root",
         "mode": "0644"}]
    assert nsf.node_state_files({"x": "y"}, "/d") == [{"path": "/d/x", "checksum": sha1("y")}]
    with pytest.raises(AnsibleFilterError):
        nsf.node_state_files(["x"], "/d")


def test_paths_with_the_same_state_are_listed_once_each():
    assert nsf.node_state_paths(["/etc/a", "/var/b", "/etc/a"], "directory", owner="root", mode="0755") == [
        {"path": "/etc/a", "state": "directory", "owner": "root", "mode": "0755"},
        {"path": "/var/b", "state": "directory", "owner": "root", "mode": "0755"}]
    assert nsf.node_state_paths(["/etc/a"]) == [{"path": "/etc/a", "state": "file"}]
    with pytest.raises(AnsibleFilterError):
        nsf.node_state_paths("/etc/a")


def test_units_and_their_stale_inputs():
    assert nsf.node_state_units(["a.service"]) == [{"name": "a.service", "enabled": True, "started": True}]
    assert nsf.node_state_units(["a.service"], started=False)[0]["started"] is False
    assert nsf.node_state_stale_inputs(["a.service", "b.service"], {"a.service": ["/etc/k"], "c.service": ["/x"]}) == {
        "a.service": ["/etc/k"], "b.service": []}
    assert nsf.node_state_stale_inputs([], None) == {}


@pytest.mark.parametrize("entry, text", [
    ({"format": "env", "key": "VLLM_API_KEY", "mode": "0600"}, "VLLM_API_KEY=s3cret\n"),
    ({"format": "yaml", "key": "api-key", "mode": "0600"}, "api-key: s3cret\n"),
])
def test_key_file_text_reads_back_as_the_key(entry, text):
    assert ak.api_key_file_text(entry, "s3cret") == text
    assert api_key_from_text(text) == "s3cret"


def test_a_chosen_key_is_compared_by_checksum_a_generated_one_only_by_owner_and_mode():
    files = {"/etc/sparkctl/api-key.env": {"format": "env", "key": "VLLM_API_KEY", "mode": "0600"}}
    chosen = ak.api_key_file_states(files, "s3cret", "spark")
    assert chosen == [{"path": "/etc/sparkctl/api-key.env", "owner": "spark", "group": "spark", "mode": "0600",
                       "checksum": sha1("VLLM_API_KEY=s3cret\n")}]
    assert "s3cret" not in repr(chosen)
    generated = ak.api_key_file_states(files, "", "spark")
    assert "checksum" not in generated[0]
    with pytest.raises(AnsibleFilterError):
        ak.api_key_file_states(["x"], "", "spark")


@pytest.mark.parametrize("text, key", [
    ("VLLM_API_KEY=abcDEF123\n", "abcDEF123"),
    ("api-key: abcDEF123\n", "abcDEF123"),
    ("# comment\nexport VLLM_API_KEY='quoted key'\n", "quoted key"),
    ('api-key: "k"\n', "k"),
    ("OTHER=1\n", None),
    ("VLLM_API_KEY=\n", None),
    ("", None),
])
def test_the_key_comes_out_of_either_engine_file(text, key):
    assert api_key_from_text(text) == key


def test_a_key_file_without_a_key_fails_without_echoing_it():
    with pytest.raises(AnsibleFilterError) as err:
        ak.api_key_value("NOT_THE_KEY=sentinel-secret-value")
    assert "sentinel" not in str(err.value) and "serve stage" in str(err.value)
    assert ak.api_key_value("VLLM_API_KEY=abc") == "abc"
