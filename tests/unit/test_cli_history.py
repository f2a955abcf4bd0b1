"""`sparkctl history`: the deployments a passing verify recorded on this control node, newest
first, as a table or one JSON list. Nothing here runs a playbook."""

import json

import pytest
from rich.console import Console
from sparkctl import cli, history, project


def record(recorded_at, profile="lab-standin", runtime_id="4f1d8a6c0b2e9d7f3a5c", commit="3f1e0c2a9b8d7e6f5a4b",
           status="passed", version="0.1.0", kind="venv"):
    return {"schema_version": 1, "deployment_id": "sha256:" + recorded_at.replace(":", "").replace("-", "").lower() * 3,
            "recorded_at": recorded_at, "verify_status": status, "sparkctl_version": version,
            "profile": {"name": profile, "sha256": "sha256:abc"},
            "checkpoint": {"source": "hub", "repo_id": "org/model", "revision": "main", "commit": commit},
            "runtime": {"kind": kind, "id": runtime_id},
            "engine": {"kind": "vllm", "package": "vllm", "version": "0.25.1", "config_sha256": "sha256:def"}}


@pytest.fixture
def project_dir(tmp_path, monkeypatch):
    (tmp_path / "site.yml").write_text("---\n")
    (tmp_path / "ansible.cfg").write_text("")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    monkeypatch.setenv("SPARKCTL_PROJECT", str(tmp_path))
    monkeypatch.delenv("SPARKCTL_REPORT_DIR", raising=False)
    monkeypatch.delenv("SPARKCTL_DEPLOYMENT_DIR", raising=False)
    (tmp_path / "inventories" / "spark").mkdir(parents=True)
    (tmp_path / "inventories" / "spark" / "hosts.yml").write_text("---\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def own(project_dir):
    """The default inventory's own history directory under the project's deployments/."""
    return history.inventory_history(project_dir / ".sparkctl" / "deployments", project_dir / "inventories" / "spark")


def write(directory, *records):
    directory.mkdir(parents=True, exist_ok=True)
    for rec in records:
        stamp = rec["recorded_at"].replace("-", "").replace(":", "")
        (directory / f"{stamp}-{rec['deployment_id'][7:19]}.json").write_text(json.dumps(rec, indent=2) + "\n")


def test_the_history_sits_beside_the_reports(project_dir, monkeypatch):
    assert project.deployment_dir(project_dir) == project_dir / ".sparkctl" / "deployments"
    monkeypatch.setenv("SPARKCTL_REPORT_DIR", "lab/reports")
    assert project.deployment_dir(project_dir) == project_dir / "lab" / "deployments"
    monkeypatch.setenv("SPARKCTL_DEPLOYMENT_DIR", "elsewhere")
    assert project.deployment_dir(project_dir) == project_dir / "elsewhere"


def test_lists_newest_first_with_short_ids(project_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    old = record("2026-05-04T10:11:12Z", runtime_id="a" * 64)
    new = record("2026-06-01T08:00:00Z", profile="lab-image", kind="image", runtime_id="sha256:" + "b" * 64,
                 status="passed_with_warnings", commit="c" * 40)
    write(own(project_dir), old, new)

    rows = history.history_rows(history.load_history(own(project_dir))[0])

    assert rows == [
        ("1", "2026-06-01 08:00", new["deployment_id"][7:15], "lab-image", "b" * 8, "c" * 8, "passed_with_warnings", "0.1.0"),
        ("2", "2026-05-04 10:11", old["deployment_id"][7:15], "lab-standin", "a" * 8, "3f1e0c2a", "passed", "0.1.0"),
    ]
    assert cli.main(["history"]) == 0
    out = capsys.readouterr().out
    assert out.index("lab-image") < out.index("lab-standin") and "history:" in out


def test_a_revision_without_a_commit_and_a_path_source(project_dir):
    hub = record("2026-05-04T10:11:12Z", commit=None)
    path = dict(record("2026-05-05T10:11:12Z"), checkpoint={"source": "path", "path": "/data/ckpt"})

    rows = history.history_rows([hub, path])

    assert rows[0][5] == "main" and rows[1][5] == "/data/ckpt"


def test_json_prints_the_records_newest_first(project_dir, capsys):
    old, new = record("2026-05-04T10:11:12Z"), record("2026-06-01T08:00:00Z")
    write(own(project_dir), old, new)

    assert cli.main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [new, old]


def test_no_history_says_how_one_is_made(project_dir, capsys):
    assert cli.main(["history"]) == 1
    assert "a passing `sparkctl verify`" in capsys.readouterr().out.replace("\n", " ")
    assert cli.main(["history", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == []


def test_a_file_that_is_not_a_record_is_named_and_skipped(project_dir, capsys):
    directory = project_dir / ".sparkctl" / "deployments"
    write(directory, record("2026-05-04T10:11:12Z"))
    (directory / "broken.json").write_text("{")
    (directory / "other.json").write_text("[]")

    records, problems = history.load_history(directory)

    assert len(records) == 1 and len(problems) == 2
    history.show_history(directory, Console(width=200))
    out = capsys.readouterr().out
    assert "broken.json" in out and "not a deployment record" in out


def test_each_inventory_has_its_own_history(project_dir, capsys, tmp_path_factory):
    """Two clusters run from one checkout: each inventory lists only what was recorded for it."""
    other = project_dir / "inventories" / "other"
    other.mkdir()
    (other / "hosts.yml").write_text("---\n")
    mine = record("2026-05-04T10:11:12Z", profile="mine-profile")
    theirs = record("2026-06-01T08:00:00Z", profile="their-profile")
    write(own(project_dir), mine)
    write(history.inventory_history(project_dir / ".sparkctl" / "deployments", other), theirs)

    assert cli.main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [mine]
    # The hosts file names the same inventory as its directory.
    assert cli.main(["history", "--json", "-i", str(other / "hosts.yml")]) == 0
    assert json.loads(capsys.readouterr().out) == [theirs]
    assert own(project_dir) != history.inventory_history(project_dir / ".sparkctl" / "deployments", other)


def test_an_inventory_directory_its_hosts_file_and_a_link_to_it_name_one_history(tmp_path):
    """-i takes the inventory directory or its hosts file, through a link or not: one history,
    named by the collection's key (module_utils/deployment.py, inventory_key)."""
    inventory = tmp_path / "inventories" / "mine"
    inventory.mkdir(parents=True)
    (inventory / "hosts.yml").write_text("---\n")
    link = tmp_path / "link"
    link.symlink_to(inventory)
    names = {history.inventory_history(tmp_path, given).name
             for given in (inventory, inventory / "hosts.yml", link, link / "hosts.yml")}
    assert len(names) == 1 and names.pop().startswith("mine-")
