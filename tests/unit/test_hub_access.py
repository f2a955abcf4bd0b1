"""sparkctl.spark.hub_access: may the head download the checkpoint's repo with the token it has?

The probe runs against the hub stand-in (tests/lab/hub/hubstub.py) on 127.0.0.1, gated or not;
the verdict table is checked on recorded answers; preflight's hub.access check wraps it. The
token never appears in a result or message."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import module_runner
import pytest
from ansible_collections.sparkctl.spark.plugins.plugin_utils.preflight_checks import check_hub, preflight_checks, preflight_lines
from inventory_check import inventory_problems
from ansible_collections.sparkctl.spark.plugins.module_utils.hub_access import endpoint_problem, hub_options, probe, verdict
from ansible_collections.sparkctl.spark.plugins.modules import hub_access as hub_access_module

from hubstub import HubStub  # tests/lab/hub, on sys.path through conftest.py

pytestmark = pytest.mark.usefixtures("loopback_only")

REPO_ID = "sparklab/gated-llama"
# conftest.py's ckpt, stub and hub: the stand-in serving this checkpoint, gated per test.
HUB_CHECKPOINT = {"shards": 2, "shard_bytes": 1 << 20, "seed": 3}
GRANTED = "hf_lab_granted_0123456789"
NOT_GRANTED = "hf_lab_not_granted_987654"
PRIVATE = "hf_lab_private_555"
EMPTY_TOKEN_MESSAGE = (
    f"spark_hf_token is empty but {REPO_ID} is gated on the hub (401): set HF_TOKEN on the control node or vault spark_hf_token"
)


def _judge(hub, token=None, revision="main", repo_id=REPO_ID):
    result = probe(repo_id, revision, token=token, endpoint=hub.url)
    return result, verdict(result)


# -- against the stand-in -------------------------------------------------------------------


def test_an_open_repo_passes_anonymously(hub):
    result, judged = _judge(hub)
    assert judged["status"] == "pass" and judged["fix"] == ""
    assert result["info_status"] == 200 and result["content_status"] == 206
    assert result["file"] == "model-00001-of-00002.safetensors" and result["commit"] == hub.commit
    assert result["gated"] is False and result["redirects"] == 0


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


def test_the_probe_reads_one_byte_of_an_lfs_file(hub):
    # Not the small config.json (a plain git file the hub serves itself): one byte of a weight
    # shard, the kind of file the download fetches from wherever the hub stores large files.
    result, judged = _judge(hub)
    assert judged["status"] == "pass"
    assert result["file"] == "model-00001-of-00002.safetensors"
    assert result["content_status"] == 206
    stats = hub.settled_stats(lambda s: any(e["range"] == "bytes=0-0" for e in s["log"]))
    probe = [e for e in stats["log"] if "/resolve/" in e["path"]]
    assert [(e["method"], e["range"], e["bytes"]) for e in probe] == [("GET", "bytes=0-0", 1)]
    # Counted as a probe, not as a download of the shard.
    shard = stats["files"]["model-00001-of-00002.safetensors"]
    assert shard["probes"] == 1 and shard["gets"] == 0


def test_a_hub_that_lists_the_repo_but_refuses_downloads_fails(hub):
    # Metadata and HEAD answer; the content itself is refused (a proxy, a storage outage, a
    # token that may list but not read): the download would fail, so preflight fails.
    hub.set_faults(fail_status=403, fail_times=0)
    result, judged = _judge(hub)
    assert result["info_status"] == 200 and result["content_status"] == 403
    assert judged["status"] == "fail"
    assert judged["detail"].startswith(
        f"the hub lists {REPO_ID}@main but refused to download model-00001-of-00002.safetensors (403")
    assert "spark_hf_endpoint" in judged["fix"] and "spark_hf_token" in judged["fix"]


def test_a_hub_whose_downloads_fail_with_5xx_is_a_warning(hub):
    hub.set_faults(fail_status=503, fail_times=0)
    result, judged = _judge(hub)
    assert result["content_status"] == 503
    assert judged["status"] == "warn" and "503" in judged["detail"]


def test_a_redirect_to_the_cdn_is_followed_without_the_token(ckpt):
    # LFS files: the hub answers 302 to its CDN (another origin); the probe follows it, reads one
    # byte there and, like huggingface_hub, does not carry the token to the other origin.
    with HubStub(ckpt, REPO_ID, token=PRIVATE, lfs_redirect=True) as server:
        result, judged = _judge(server, token=PRIVATE)
        stats = server.settled_stats(lambda s: s["by_route"].get("cdn"))
        assert judged["status"] == "pass", judged
        assert result["file"].endswith(".safetensors") and result["content_status"] == 206
        assert result["download_host"] == server.hub.cdn_base.split("//", 1)[1]
        assert stats["by_route"].get("cdn") == 1 and stats["status"]["302"] == 1
        assert stats["cdn_requests_with_authorization"] == 0
        # The CDN refusing is a refusal of the download, named with the host that refused.
        server.set_faults(fail_status=403, fail_times=0)
        result, judged = _judge(server, token=PRIVATE)
        assert judged["status"] == "fail" and result["content_status"] == 403
        assert f"from {result['download_host']}" in judged["detail"]
        assert PRIVATE not in json.dumps([result, judged])


def test_an_unreachable_hub_is_a_warning():
    result, judged = _judge(type("Hub", (), {"url": "http://127.0.0.1:9"})())
    assert result["reachable"] is False
    assert judged["status"] == "warn" and "could not reach the hub" in judged["detail"]


# -- 3xx answers the probe does not follow ----------------------------------------------------


class _Answers(BaseHTTPRequestHandler):
    """A hub on loopback that lists one LFS file and answers each path as the test sets it:
    server.answers maps a path (query included) to (status, headers); /hop/N redirects to
    /hop/N+1 for ever."""

    def log_message(self, format, *args):  # noqa: A002 (signature of the base class)
        pass

    def do_GET(self):  # noqa: N802 (http.server naming)
        answer = self.server.answers.get(self.path)
        if answer is None and self.path.startswith("/hop/"):
            answer = (302, {"Location": "/hop/%d" % (int(self.path.rsplit("/", 1)[1]) + 1)})
        if answer is None and self.path.startswith("/api/models/"):
            siblings = [{"rfilename": "config.json"}, {"rfilename": "model.safetensors", "lfs": {"size": 10}}]
            body = json.dumps({"sha": "b" * 40, "gated": False, "siblings": siblings}).encode()
            answer = (200, {"Content-Type": "application/json"}, body)
        status, headers, body = (answer + (b"",))[:3] if answer else (404, {}, b"")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def answers_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.answers = {}
    server.url = "http://127.0.0.1:%d" % server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def answering_hub(answers_server):
    answers_server.answers.clear()
    yield answers_server
    answers_server.answers.clear()


RESOLVE = "/sparklab/x/resolve/main/model.safetensors"
INFO = "/api/models/sparklab/x/revision/main?blobs=true"


@pytest.mark.parametrize("path, answer, answered_by, why", [
    (RESOLVE, (304, {}), RESOLVE, "not a redirect"),
    (RESOLVE, (300, {"Location": "/elsewhere"}), RESOLVE, "not a redirect"),
    (RESOLVE, (305, {"Location": "http://127.0.0.1:9/"}), RESOLVE, "not a redirect"),
    (RESOLVE, (302, {}), RESOLVE, "no Location"),
    (RESOLVE, (307, {"Location": "file:///etc/passwd"}), RESOLVE, "file:///etc/passwd, which is not http"),
    (RESOLVE, (308, {"Location": "ftp://127.0.0.1:9/model.safetensors"}), RESOLVE, "which is not http"),
    (RESOLVE, (302, {"Location": "/hop/1"}), "/hop/5", "redirect 6 in a row, more than the 5"),
    (RESOLVE, (302, {"Location": RESOLVE}), RESOLVE, "redirect 6 in a row, more than the 5"),
    (INFO, (304, {}), INFO, "not a redirect"),
], ids=["304", "300", "305", "302-without-location", "307-to-file", "308-to-ftp", "over-the-hop-limit", "a-loop",
        "metadata-304"])
def test_a_3xx_answer_the_probe_does_not_follow_fails_naming_the_url_and_status(answering_hub, path, answer,
                                                                                  answered_by, why):
    # The download follows 301, 302, 303, 307 and 308 with a Location to http(s), at most 5 of
    # them: any other 3xx means it would not get the file, whatever the check made of it.
    answering_hub.answers[path] = answer
    result = probe("sparklab/x", "main", token=GRANTED, endpoint=answering_hub.url)
    judged = verdict(result)
    status = answer[0]
    assert judged["status"] == "fail", (result, judged)
    assert f"{answering_hub.url}{answered_by} answered {status}" in judged["detail"], judged["detail"]
    assert why in judged["detail"] and "spark_hf_endpoint" in judged["fix"]
    assert GRANTED not in json.dumps([result, judged])


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
        ({"info_status": 401, "info_error_code": "RepoNotFound"}, "fail",
         "spark_checkpoint.repo_id nota-ai/X is not on the hub, or is private"),
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


# -- a token never crosses the network in clear text ------------------------------------------


@pytest.mark.parametrize("endpoint, token", [
    ("", "hf_x"),                              # the real hub (https)
    ("https://hf-mirror.example.com", "hf_x"),
    ("http://hf-mirror.example.com", ""),      # a mirror that needs no token
    ("http://127.0.0.1:8765", "hf_x"),         # the node's own loopback (the lab's stand-in)
    ("http://127.3.2.1:8765", "hf_x"),
    ("http://localhost:8765", "hf_x"),
    ("http://[::1]:8765", "hf_x"),
    ("http://[::ffff:127.0.0.1]:8765", "hf_x"),
])
def test_endpoints_a_token_may_go_to(endpoint, token):
    assert endpoint_problem(endpoint, token) is None


@pytest.mark.parametrize("endpoint, token, text", [
    ("http://hf-mirror.example.com", "hf_x", "is plain http to hf-mirror.example.com while 'spark_hf_token' is set"),
    ("http://10.0.0.5:8765", "hf_x", "is plain http to 10.0.0.5"),
    ("http://[fd00::5]:8765", "hf_x", "is plain http to fd00::5"),
    ("http://localhost.example.com", "hf_x", "is plain http to localhost.example.com"),
    ("HTTP://128.0.0.1", "hf_x", "is plain http to 128.0.0.1"),
    ("ftp://hf-mirror.example.com", "", "is not an http(s) URL"),
    ("hf-mirror.example.com", "", "is not an http(s) URL"),
    ("http://host:port", "", "is not an http(s) URL"),
])
def test_endpoints_refused(endpoint, token, text):
    problem = endpoint_problem(endpoint, token)
    assert problem and problem.startswith("'spark_hf_endpoint'") and text in problem, problem
    assert "hf_x" not in problem
    if token:
        assert "use https://" in problem and "leave spark_hf_token empty" in problem


def _inventory(**group_vars):
    groups = {"all": ["spark1", "spark2"], "spark_head": ["spark1"], "spark_workers": ["spark2"]}
    hostvars = {}
    for i, host in enumerate(groups["all"]):
        hostvars[host] = {
            "ansible_host": f"10.0.0.{11 + i}",
            "spark_management_network": "10.0.0.0/24",
            "spark_link": [{"interface": "enp1s0f1np1", "address": f"192.168.100.{10 + i}/24"},
                           {"interface": "enP2p1s0f1np1", "address": f"192.168.101.{10 + i}/24"}],
            **group_vars,
        }
    return groups, hostvars


def test_validation_refuses_a_token_over_plain_http_naming_the_variable():
    secret = "hf_validation_secret_777"
    problems = inventory_problems(*_inventory(spark_hf_endpoint="http://hf-mirror.example.com", spark_hf_token=secret))
    found = [p for p in problems if "spark_hf_endpoint" in p]
    assert len(found) == 1, problems
    assert "is plain http to hf-mirror.example.com while 'spark_hf_token' is set" in found[0]
    assert "use https://" in found[0] and secret not in " ".join(problems)
    for endpoint, token in (("http://127.0.0.1:8765", secret), ("https://hf-mirror.example.com", secret),
                            ("http://hf-mirror.example.com", "")):
        problems = inventory_problems(*_inventory(spark_hf_endpoint=endpoint, spark_hf_token=token))
        assert not [p for p in problems if "spark_hf_endpoint" in p], (endpoint, problems)


@pytest.mark.parametrize(("params", "environ", "expected"), [
    ({"token": "", "endpoint": ""}, {}, (None, None)),
    ({"token": None, "endpoint": None}, {"HF_ENDPOINT": "http://127.0.0.1:8765"}, (None, "http://127.0.0.1:8765")),
    ({"token": "hf_x", "endpoint": "https://hf-mirror.example.com"}, {"HF_ENDPOINT": "http://127.0.0.1:8765"},
     ("hf_x", "https://hf-mirror.example.com")),
    ({"token": "hf_x", "endpoint": ""}, {"HF_ENDPOINT": ""}, ("hf_x", None)),
])
def test_hub_options_fall_back_to_the_nodes_hf_endpoint_then_the_real_hub(params, environ, expected):
    # hub_access and checkpoint_fit read their hub options with it: an empty option is anonymous / the node's hub.
    assert hub_options(params, environ) == expected


def test_the_probe_sends_nothing_when_the_token_would_go_in_clear_text(loopback_only):
    # The module takes its endpoint from HF_ENDPOINT too, which validation never sees.
    result = probe(REPO_ID, "main", token=GRANTED, endpoint="http://192.0.2.10:8765")
    judged = verdict(result)
    assert result["info_status"] is None and loopback_only == []  # not even a connection attempt
    assert judged["status"] == "fail" and judged["detail"].startswith("'spark_hf_endpoint' 'http://192.0.2.10:8765'")
    assert judged["fix"].startswith("Use https://")
    assert GRANTED not in json.dumps([result, judged])
