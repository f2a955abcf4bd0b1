"""The integration tests' output readers (recap counters, changed task names) and the fault
catalogue's batches (which faults may share a repair run, which changes a batch explains)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import pytest  # noqa: E402
import yaml  # noqa: E402
from labrun import (  # noqa: E402
    batch_problems,
    batch_tags,
    changed_tasks,
    fault_batches,
    node_args,
    parse_recap,
    unexplained_changes,
    venv_of_unit,
)

CATALOGUE = Path(__file__).resolve().parents[1] / "catalogue" / "faults.yml"

OUTPUT = """
TASK [direct_link : Write the netplan file] ***********************************
ok: [spark1]
changed: [spark2]

TASK [fabric_env : Write the fabric environment file] *************************
changed: [spark1]
ok: [spark2]

RUNNING HANDLER [fabric_env : Reload systemd units] ***************************
changed: [spark1]

TASK [preflight : Create the report directory on the control node] ************
changed: [spark1 -> localhost]

PLAY RECAP *********************************************************************
localhost                  : ok=2    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
spark1                     : ok=11   changed=3    unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
spark2                     : ok=9    changed=1    unreachable=1    failed=0    skipped=2    rescued=0    ignored=0
"""


def test_recap_counters_per_host():
    recap = parse_recap(OUTPUT)
    assert recap["spark1"]["changed"] == 3
    assert recap["spark2"]["unreachable"] == 1
    assert recap["localhost"]["ok"] == 2


def test_changed_task_names_per_host():
    assert changed_tasks(OUTPUT) == {
        "spark1": [
            "fabric_env : Write the fabric environment file",
            "fabric_env : Reload systemd units",
            "preflight : Create the report directory on the control node",
        ],
        "spark2": ["direct_link : Write the netplan file"],
    }


def fault(fault_id, node, owner=None, drifted_only=False, tags="provision", **extra):
    entry = {"id": fault_id, "tags": tags, "break": [{"node": node, "run": ["true"]}], "repaired": []}
    if owner:
        entry["owner"] = owner
    if drifted_only:
        entry["drifted_only"] = True
    return {**entry, **extra}


def test_a_fault_without_batch_is_a_batch_of_its_own_and_order_follows_first_appearance():
    faults = [fault("a", "spark1", batch="x"), fault("b", "spark2"), fault("c", "spark2", batch="x")]
    assert [(name, [f["id"] for f in members]) for name, members in fault_batches(faults)] == [
        ("x", ["a", "c"]), ("b", ["b"])]


def test_batch_tags_join_without_repeats():
    assert batch_tags([fault("a", "spark1", tags="provision"), fault("b", "spark2", tags="checkpoint"),
                       fault("c", "spark2", tags="provision")]) == "provision,checkpoint"


@pytest.mark.parametrize("members, reason", [
    ([fault("a", "spark1", owner="linger"), fault("b", "spark2")], "b names no owner"),
    ([fault("a", "spark1", owner="checkpoint"), fault("b", "spark2", owner="checkpoint", drifted_only=True)],
     "share the owner checkpoint"),
    ([fault("a", "spark2", owner="direct_link", drifted_only=True),
      fault("b", "spark2", owner="direct_link", drifted_only=True)], "share the owner direct_link"),
    ([fault("a", "spark1", owner="linger", requires="image_runtime"), fault("b", "spark2", owner="firewall")],
     "different lab preconditions"),
    ([fault("a", "spark1", owner="linger", extra_vars={"x": 1}), fault("b", "spark2", owner="firewall")],
     "different extra_vars"),
])
def test_a_batch_that_would_weaken_a_faults_checks_is_refused(members, reason):
    for member in members:
        member["batch"] = "x"
    problems = batch_problems(members)
    assert any(reason.split()[-1] in p for p in problems), problems


def test_sound_batches_pass_and_a_lone_fault_may_name_no_owner():
    faults = [fault("a", "spark1", owner="direct_link", drifted_only=True, batch="x"),
              fault("b", "spark2", owner="direct_link", drifted_only=True, batch="x"),
              fault("c", "spark2", owner="linger", batch="x"),
              fault("d", "spark1")]
    assert batch_problems(faults) == []


def test_the_catalogues_batches_are_sound():
    assert batch_problems(yaml.safe_load(CATALOGUE.read_text())) == []


def test_the_killed_engine_is_judged_alone():
    """Killing the head's engine and re-running at once: the repair run may record the worker's
    baseline, depending on how far the engine's restart got (seen on the lab; the clean-clone
    suite failed the batch it was in on it). Alone and without an owner, that is explained; the
    quiet run still has to change nothing."""
    faults = yaml.safe_load(CATALOGUE.read_text())
    (killed,) = [f for f in faults if f["id"] == "engine_killed"]
    assert "batch" not in killed and "owner" not in killed and not killed.get("drifted_only")
    changed = {"spark1": ["ray_cluster : Enable and start the Ray head"],
               "spark2": ["engine_service : Check the memory gate and record the pre-engine baseline",
                          "ray_cluster : Enable and start the Ray workers"]}
    assert unexplained_changes(changed, [killed]) == {}


def test_a_lone_fault_is_judged_as_before_owner_and_drifted_node():
    lone = [fault("a", "spark2", owner="linger", drifted_only=True)]
    changed = {"spark1": ["linger : Enable lingering"], "spark2": ["linger : Enable lingering", "ray_cluster : Restart"]}
    assert unexplained_changes(changed, lone) == {"spark1": ["linger : Enable lingering"],
                                                 "spark2": ["ray_cluster : Restart"]}


def test_a_change_is_explained_by_any_fault_of_the_batch_on_its_own_node():
    batch = [fault("a", "spark1", owner="direct_link", drifted_only=True),
             fault("b", "spark2", owner="ssh_mesh", drifted_only=True),
             fault("c", "spark2", owner="checkpoint")]
    changed = {"spark1": ["direct_link : Apply netplan", "checkpoint : Mirror to the workers",
                          "ssh_mesh : Authorize the mesh key"],
               "spark2": ["ssh_mesh : Authorize the mesh key", "direct_link : Apply netplan"]}
    assert unexplained_changes(changed, batch) == {"spark1": ["ssh_mesh : Authorize the mesh key"],
                                                  "spark2": ["direct_link : Apply netplan"]}


def test_a_fault_without_owner_explains_any_change_on_its_nodes_only_when_drifted_only():
    assert unexplained_changes({"spark1": ["x : y"], "spark2": ["x : y"]},
                               [fault("a", "spark1", drifted_only=True)]) == {"spark2": ["x : y"]}
    assert unexplained_changes({"spark1": ["x : y"], "spark2": ["x : y"]}, [fault("a", "spark1")]) == {}


# --- The serving venv, read from the units sparkctl writes ---------------------------------------

def _lab_units(venv_path, name="lab-standin"):
    from ansible_collections.sparkctl.spark.plugins.plugin_utils import profile as P
    from ansible_collections.sparkctl.spark.plugins.plugin_utils.profile_render import render

    lab_profiles = Path(__file__).resolve().parents[1] / "lab" / "profiles"
    profile = P.load_profile(name, [str(lab_profiles)], {})
    cluster = {"head": {"name": "spark1", "link_ip": "192.168.100.10/24", "interface": "enp1s0f1np1"},
               "workers": [{"name": "spark2", "link_ip": "192.168.100.11/24", "interface": "enp1s0f1np1"}],
               "service_user": "spark", "checkpoint_dir": "/srv/sparkctl/models/lab-standin",
               "venv_path": venv_path, "api_key_file": "/etc/sparkctl/api-key.env"}
    return render(profile, cluster)["units"]


@pytest.mark.parametrize("venv", ["/opt/sparkctl/venvs/lab-standin", "/opt/sparkctl/venvs/lab-standin-0123456789ab"])
def test_every_unit_of_the_lab_profile_names_its_venv(venv):
    units = _lab_units(venv)
    found = {(host, name): venv_of_unit(text) for host, files in units.items() for name, text in files.items()}
    assert found == {("spark1", "sparkctl-engine.service"): venv, ("spark1", "sparkctl-ray-head.service"): venv,
                     ("spark2", "sparkctl-ray-worker.service"): venv}


def test_the_real_vllms_units_name_its_venv_behind_the_rank_guard():
    """lab-vllm runs <venv>/bin/vllm behind the node's python3 (the rank guard), on every node."""
    venv = "/opt/sparkctl/venvs/lab-vllm-0123456789ab"
    units = _lab_units(venv, "lab-vllm")
    found = {(host, name): venv_of_unit(text) for host, files in units.items() for name, text in files.items()}
    assert found == {("spark1", "sparkctl-engine.service"): venv, ("spark2", "sparkctl-vllm-rank.service"): venv}


def test_a_unit_naming_no_venv_or_two_names_none():
    assert venv_of_unit("ExecStart=/usr/bin/nginx -c /etc/x.conf\n") == ""
    assert venv_of_unit("ExecStart=/a/bin/python -m x\nExecStart=/b/bin/ray start\n") == ""
    # The memory gate's ExecStartPre= runs the node's python3: not a venv.
    assert venv_of_unit("ExecStartPre=/usr/bin/python3 -c 1\nExecStart=/v/bin/python -m x\n") == "/v"


def test_a_catalogue_step_without_the_placeholder_reads_no_node():
    assert node_args("nowhere", ["test", "-e", 7]) == ["test", "-e", "7"]
