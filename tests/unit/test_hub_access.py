"""sparkctl.spark.hub_access: may the head download the checkpoint's repo with the token it has?

The probe runs against the hub stand-in (tests/lab/hub/hubstub.py) on 127.0.0.1, gated or not;
the verdict table is checked on recorded answers; preflight's hub.access check wraps it. The
token never appears in a result or message."""

from __future__ import annotations

import json

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.filter.preflight_checks import check_hub, preflight_checks, preflight_lines
from ansible_collections.sparkctl.spark.plugins.module_utils.hub_access import probe, verdict
from ansible_collections.sparkctl.spark.plugins.modules import hub_access as hub_access_module

from hubstub import HubStub  # tests/lab/hub, on sys.path through conftest.py
from make_checkpoint import make_checkpoint

pytestmark = pytest.mark.usefixtures("loopback_only")

REPO_ID = "sparklab/gated-llama"
GRANTED = "hf_lab_granted_0123456789"
NOT_GRANTED = "hf_lab_not_granted_987654"
PRIVATE = "hf_lab_private_555"
EMPTY_TOKEN_MESSAGE = (
    f"spark_hf_token is empty but {REPO_ID} is gated on the hub (401): set HF_TOKEN on the control node or vault spark_hf_token"
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt_gated")
    make_checkpoint(root, shards=2, shard_bytes=1 << 20, seed=3, workers=1)
    return root


@pytest.fixture(scope="module")
def stub(ckpt):
    with HubStub(ckpt, REPO_ID) as server:
        yield server


@pytest.fixture
def hub(stub):
    stub.reset()
    yield stub
    stub.reset()


def _judge(hub, token=None, revision="main", repo_id=REPO_ID):
    result = probe(repo_id, revision, token=token, endpoint=hub.url)
    return result, verdict(result)


# -- against the stand-in -------------------------------------------------------------------


def test_an_open_repo_passes_anonymously(hub):
    result, judged = _judge(hub)
    assert judged["status"] == "pass" and judged["fix"] == ""
    assert result["info_status"] == 200 and result["content_status"] == 200
    assert result["file"] == "config.json" and result["commit"] == hub.commit and result["gated"] is False


def test_gated_repo_without_a_token_is_refused_naming_the_variable(hub):
    hub.set_faults(gated="manual")
    result, judged = _judge(hub)
    # The metadata of a gated repo is public; the content answers 401 GatedRepo.
    assert result["info_status"] == 200 and result["gated"] == "manual"
    assert result["content_status"] == 401 and result["content_error_code"] == "GatedRepo"
    assert judged["status"] == "fail"
    assert judged["message"].startswith(EMPTY_TOKEN_MESSAGE)
    assert f"{hub.url}/{REPO_ID}" in judged["fix"]
    assert hub.stats()["gated"]["unauthenticated"] == 1


def test_gated_repo_with_a_token_not_granted_is_refused_with_403(hub):
    hub.set_faults(gated="auto", gated_tokens=[GRANTED])
    result, judged = _judge(hub, token=NOT_GRANTED)
    assert result["content_status"] == 403
    assert judged["status"] == "fail"
    assert judged["detail"] == f"spark_hf_token has no access to {REPO_ID}, which is gated on the hub (403)."
    assert "Accept the model's terms" in judged["fix"]
    assert NOT_GRANTED not in json.dumps([result, judged])


def test_gated_repo_with_a_granted_token_passes(hub):
    hub.set_faults(gated="manual", gated_tokens=[GRANTED])
    result, judged = _judge(hub, token=GRANTED)
    assert judged["status"] == "pass" and "gated: manual, the token has access" in judged["detail"]
    assert hub.stats()["gated"] == {"unauthenticated": 0, "denied": 0, "granted": 1}
    assert GRANTED not in json.dumps([result, judged])


def test_gated_metadata_is_refused_at_the_first_request(hub):
    hub.set_faults(gated="manual", gated_metadata=True)
    result, judged = _judge(hub)
    assert result["info_status"] == 401 and result["content_status"] is None
    assert judged["message"].startswith(EMPTY_TOKEN_MESSAGE)


def test_unknown_repo_and_revision_name_their_variables(hub):
    _, judged = _judge(hub, repo_id="sparklab/no-such-model")
    assert judged["status"] == "fail" and judged["detail"].startswith("spark_checkpoint.repo_id sparklab/no-such-model is not on the hub")
    _, judged = _judge(hub, revision="v9")
    assert judged["status"] == "fail" and judged["detail"].startswith("spark_checkpoint.revision 'v9' does not exist")


def test_private_repo_without_and_with_a_wrong_token(ckpt):
    with HubStub(ckpt, REPO_ID, token=PRIVATE) as server:
        _, anonymous = _judge(server)
        assert anonymous["status"] == "fail" and "or is private (401" in anonymous["detail"]
        assert "HF_TOKEN on the control node or vault spark_hf_token" in anonymous["fix"]
        result, wrong = _judge(server, token="hf_wrong_secret_42")
        assert wrong["detail"].startswith("spark_hf_token is not a valid hub token (401")
        assert "hf_wrong_secret_42" not in json.dumps([result, wrong])
        _, right = _judge(server, token=PRIVATE)
        assert right["status"] == "pass"


def test_a_redirect_to_the_cdn_counts_as_access(tmp_path):
    # Only LFS files: the probe's HEAD gets the hub's 302 to the CDN, which it does not follow.
    (tmp_path / "model.safetensors").write_bytes(b"\0" * (1 << 20))
    with HubStub(tmp_path, REPO_ID, lfs_redirect=True) as server:
        result, judged = _judge(server)
        assert result["file"] == "model.safetensors" and result["content_status"] == 302
        assert judged["status"] == "pass"
        assert server.stats()["by_route"].get("cdn", 0) == 0


def test_an_unreachable_hub_is_a_warning():
    result, judged = _judge(type("Hub", (), {"url": "http://127.0.0.1:9"})())
    assert result["reachable"] is False
    assert judged["status"] == "warn" and "could not reach the hub" in judged["detail"]


# -- the verdict on recorded answers --------------------------------------------------------


def _recorded(**answer):
    base = {"endpoint": "https://huggingface.co", "repo_id": "nota-ai/X", "revision": "main", "token_given": False,
            "reachable": True, "reason": None, "info_status": 200, "info_error_code": None, "info_error_message": None,
            "gated": False, "commit": "a" * 40, "file": "config.json", "content_status": 200,
            "content_error_code": None, "content_error_message": None}
    base.update(answer)
    return base


@pytest.mark.parametrize(
    "answer, status, text",
    [
        ({}, "pass", "nota-ai/X@main is readable"),
        # The hub's answer for a gated repo, anonymous: metadata 200, content 401 GatedRepo.
        ({"gated": "auto", "content_status": 401, "content_error_code": "GatedRepo"}, "fail",
         "spark_hf_token is empty but nota-ai/X is gated on the hub (401): set HF_TOKEN on the control node or vault spark_hf_token"),
        # Some gated repos answer the metadata with 401 GatedRepo already.
        ({"info_status": 401, "info_error_code": "GatedRepo", "content_status": None}, "fail",
         "spark_hf_token is empty but nota-ai/X is gated on the hub (401)"),
        ({"token_given": True, "gated": "manual", "content_status": 403, "content_error_code": "GatedRepo"}, "fail",
         "spark_hf_token has no access to nota-ai/X"),
        ({"token_given": True, "gated": "manual", "content_status": 401, "content_error_code": "GatedRepo"}, "fail",
         "the hub refused spark_hf_token for nota-ai/X"),
        ({"token_given": True, "info_status": 401, "info_error_message": "Invalid credentials in Authorization header"}, "fail",
         "spark_hf_token is not a valid hub token"),
        ({"info_status": 404, "info_error_code": "RevisionNotFound"}, "fail", "spark_checkpoint.revision 'main' does not exist"),
        ({"info_status": 401, "info_error_code": "RepoNotFound"}, "fail", "spark_checkpoint.repo_id nota-ai/X is not on the hub, or is private"),
        ({"token_given": True, "info_status": 404, "info_error_code": "RepoNotFound"}, "fail",
         "was not found with the given spark_hf_token"),
        ({"info_status": 503}, "warn", "the hub answered 503"),
        ({"reachable": False, "reason": "timed out", "info_status": None}, "warn", "could not reach the hub"),
    ],
)
def test_verdict(answer, status, text):
    judged = verdict(_recorded(**answer))
    assert judged["status"] == status
    assert text in judged["message"], judged["message"]
    assert bool(judged["fix"]) == (status != "pass")


# -- preflight's hub.access check and the module --------------------------------------------


def test_preflight_reports_the_heads_answer_and_nothing_for_workers():
    judged = verdict(_recorded(gated="auto", content_status=401, content_error_code="GatedRepo"))
    results = check_hub({"hub": judged}, {})
    assert [(r["id"], r["status"]) for r in results] == [("hub.access", "fail")]
    line = preflight_lines(results, statuses=["fail"], with_fix=True)[0]
    assert line.startswith("[FAIL] hub.access: spark_hf_token is empty but nota-ai/X is gated on the hub (401).")
    assert "-> Fix: Set HF_TOKEN on the control node or vault spark_hf_token" in line
    # A worker (the task skipped there) and a path source get no hub.access result.
    assert check_hub({"hub": {"changed": False, "skipped": True}}, {}) == []
    assert not [r for r in preflight_checks({}, {}) if r["id"] == "hub.access"]


def test_module_refuses_without_showing_the_token(hub, capsys):
    hub.set_faults(gated="manual", gated_tokens=[GRANTED])
    args = {"repo_id": REPO_ID, "revision": "main", "token": NOT_GRANTED, "endpoint": hub.url}
    rc, out = module_runner.run_module(hub_access_module.main, args, capsys, raw=True)
    result = json.loads(out)
    assert rc == 0 and result["changed"] is False
    assert result["status"] == "fail" and result["content_status"] == 403
    assert NOT_GRANTED not in out
    rc, out = module_runner.run_module(hub_access_module.main, dict(args, token=GRANTED), capsys, raw=True)
    assert json.loads(out)["status"] == "pass" and GRANTED not in out
