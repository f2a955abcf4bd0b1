"""stale_mesh_keys only ever names lines carrying the mesh marker, and only stale ones."""

from ansible_collections.sparkctl.spark.plugins.filter.stale_mesh_keys import parse_authorized_key, stale_mesh_keys

LAB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIC5AZNH6+BLNAOVWGJAaWjvozS0s67roXMVm8HAr8m/8 sparklab@vm"
HEAD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM3wvIQp2mL7e+GKApQfe9HAmM0HPCvwTwVaSkLnnV8b sparkctl-mesh@spark1"
OLD_HEAD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDOLDO sparkctl-mesh@spark1"
OPTS = 'from="192.168.100.0/24,192.168.101.0/24",no-agent-forwarding,no-X11-forwarding '


def test_current_keys_and_foreign_keys_stay():
    text = "\n".join([LAB, OPTS + HEAD_KEY, "# a comment", ""])
    assert stale_mesh_keys(text, {"spark1": HEAD_KEY}) == []


def test_regenerated_key_is_stale():
    text = "\n".join([LAB, OPTS + OLD_HEAD_KEY, OPTS + HEAD_KEY])
    assert stale_mesh_keys(text, {"spark1": HEAD_KEY}) == [{"key": OLD_HEAD_KEY, "peer": "spark1", "reason": "key replaced"}]


def test_former_peer_is_stale():
    former = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFORMERFORMERFORMERFORMERFORMERFORMERFORMERF sparkctl-mesh@spark9"
    assert stale_mesh_keys(OPTS + former, {"spark1": HEAD_KEY}) == [{"key": former, "peer": "spark9", "reason": "not a peer"}]


def test_unknown_expected_key_keeps_the_line():
    assert stale_mesh_keys(OPTS + OLD_HEAD_KEY, {"spark1": None}) == []


def test_renamed_host_with_the_current_key_is_not_stale():
    renamed = HEAD_KEY.replace("@spark1", "@oldname")
    assert stale_mesh_keys(OPTS + renamed, {"spark1": HEAD_KEY}) == []


def test_marker_is_configurable_and_lines_without_it_are_ignored():
    text = OPTS + OLD_HEAD_KEY.replace("sparkctl-mesh@", "other@")
    assert stale_mesh_keys(text, {}) == []
    assert stale_mesh_keys(text, {}, marker="other@")[0]["peer"] == "spark1"


def test_empty_file():
    assert stale_mesh_keys("", {"spark1": HEAD_KEY}) == []
    assert stale_mesh_keys(None, None) == []


def test_parse_options_with_quoted_spaces():
    line = 'command="echo hello world",no-pty ssh-rsa AAAAB3Nza user@host with spaces'
    assert parse_authorized_key(line) == {
        "options": 'command="echo hello world",no-pty',
        "type": "ssh-rsa",
        "blob": "AAAAB3Nza",
        "comment": "user@host with spaces",
    }


def test_parse_other_key_types_and_garbage():
    assert parse_authorized_key("sk-ssh-ed25519@openssh.com AAAA x")["type"] == "sk-ssh-ed25519@openssh.com"
    assert parse_authorized_key("ecdsa-sha2-nistp256 AAAA")["comment"] == ""
    assert parse_authorized_key("not a key") is None
    assert parse_authorized_key("ssh-ed25519") is None
