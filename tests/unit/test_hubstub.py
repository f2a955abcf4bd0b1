"""The hub stand-in (tests/lab/hub/hubstub.py) driven by the real huggingface_hub client.

Everything runs on 127.0.0.1: a guard on socket.connect/getaddrinfo fails the module if the
client tries to reach (or even resolve) anything else. Checkpoints are small; the resume
tests use shards just over 10 MiB because huggingface_hub writes downloads in 10 MiB chunks
(constants.DOWNLOAD_CHUNK_SIZE), so a cut inside the first chunk resumes from byte 0
without a Range header.
"""

import filecmp
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import hubstub  # tests/lab/hub, on sys.path through conftest.py
from hubstub import HubStub, git_blob_sha1
from make_checkpoint import make_checkpoint, plan_checkpoint, shard_name, shard_size

# Every test here must stay on loopback: the guard refuses and records anything else.
pytestmark = pytest.mark.usefixtures("loopback_only")

REPO_ID = "sparklab/tiny-llama"
TOKEN = "hf_stub_0123456789"
MIB = 1 << 20
# conftest.py's ckpt, stub and hub: the stand-in serving this small checkpoint (big_ckpt: one
# whose shards pass huggingface_hub's 10 MiB write chunk).
HUB_CHECKPOINT = {"shards": 3, "shard_bytes": MIB, "seed": 7}


# -- isolation ----------------------------------------------------------------------------


# -- checkpoints and stubs ----------------------------------------------------------------


def _files(root: Path) -> dict[str, Path]:
    """Regular repo files under root, by repo path (huggingface_hub's .cache/ excluded)."""
    return {
        p.relative_to(root).as_posix(): p
        for p in root.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(root).parts and ".tmp-" not in p.name
    }


def _assert_identical(source: Path, copy: Path, only=None) -> None:
    expected = {k: v for k, v in _files(source).items() if only is None or only(k)}
    got = _files(copy)
    assert sorted(got) == sorted(expected)
    for name, path in expected.items():
        assert filecmp.cmp(path, got[name], shallow=False), name


def _download(hf, server, dest, **kwargs):
    return hf.snapshot_download(REPO_ID, local_dir=dest, cache_dir=dest.parent / f"{dest.name}-cache", endpoint=server.url, **kwargs)


# -- generator ------------------------------------------------------------------------------


def test_generator_writes_valid_deterministic_shards(ckpt, tmp_path):
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in ckpt.glob("*.safetensors"))
    assert shards == [shard_name(i, 3) for i in (1, 2, 3)]
    assert sorted(set(index["weight_map"].values())) == shards
    tensor_bytes, dtypes = 0, set()
    for shard in shards:
        data = (ckpt / shard).read_bytes()
        length = int.from_bytes(data[:8], "little")
        assert length % 8 == 0
        header = json.loads(data[8 : 8 + length])
        header.pop("__metadata__")
        offset = 0
        for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
            begin, end = info["data_offsets"]
            assert begin == offset and end > begin, name
            width = {"BF16": 2, "F32": 4, "U8": 1}[info["dtype"]]
            n = 1
            for dim in info["shape"]:
                n *= dim
            assert end - begin == n * width, name
            assert index["weight_map"][name] == shard
            dtypes.add(info["dtype"])
            offset = end
        assert 8 + length + offset == len(data), "tensors must fill the data section exactly"
        tensor_bytes += offset
    assert tensor_bytes == index["metadata"]["total_size"]
    assert dtypes == {"BF16", "F32", "U8"}
    for name in ("config.json", "generation_config.json", "tokenizer.json", "README.md"):
        assert (ckpt / name).is_file()

    # Written in parallel this time (the fixture used one process): same bytes.
    again = make_checkpoint(tmp_path / "again", shards=3, shard_bytes=MIB, seed=7, workers=2)
    _assert_identical(ckpt, tmp_path / "again")
    rerun = make_checkpoint(tmp_path / "again", shards=3, shard_bytes=MIB, seed=7)
    assert rerun["written"] == [] and sorted(rerun["skipped"]) == sorted(again["files"])


def test_generator_rewrites_a_shard_with_the_wrong_size(tmp_path):
    make_checkpoint(tmp_path, shards=2, shard_bytes=MIB, seed=1)
    victim = tmp_path / shard_name(2, 2)
    original = victim.read_bytes()
    victim.write_bytes(original[:1000])
    result = make_checkpoint(tmp_path, shards=2, shard_bytes=MIB, seed=1)
    assert result["written"] == [victim.name]
    assert victim.read_bytes() == original
    plan = plan_checkpoint(2, MIB)
    assert victim.stat().st_size == shard_size(plan["shards"][1])


# -- metadata -------------------------------------------------------------------------------


def test_model_info_reports_sha256_and_size_of_every_file(hf, hub, ckpt):
    info = hf.HfApi(endpoint=hub.url).model_info(REPO_ID, revision="main", files_metadata=True)
    assert info.sha == hub.commit and len(info.sha) == 40
    files = _files(ckpt)
    assert sorted(s.rfilename for s in info.siblings) == sorted(files)
    for sibling in info.siblings:
        data = files[sibling.rfilename].read_bytes()
        assert sibling.size == len(data)
        if sibling.rfilename.endswith(".safetensors"):
            assert sibling.lfs.sha256 == hashlib.sha256(data).hexdigest()
            assert sibling.lfs.size == len(data)
        else:
            assert sibling.lfs is None
            assert sibling.blob_id == git_blob_sha1(data)
    # Pinned to the commit, the same answer; the parameter summary comes from the shard headers.
    pinned = hf.HfApi(endpoint=hub.url).model_info(REPO_ID, revision=info.sha)
    assert pinned.sha == info.sha and pinned.siblings[0].size is None
    assert set(info.safetensors.parameters) == {"BF16", "F32", "U8"}


def test_tree_paths_info_and_safetensors_headers_through_the_client(hf, hub, ckpt):
    api = hf.HfApi(endpoint=hub.url)
    tree = {f.path: f for f in api.list_repo_tree(REPO_ID, recursive=True)}
    assert sorted(tree) == sorted(_files(ckpt))
    infos = api.get_paths_info(REPO_ID, ["config.json", shard_name(1, 3), "missing.bin"])
    assert [i.path for i in infos] == ["config.json", shard_name(1, 3)]
    assert infos[1].lfs.sha256 == tree[shard_name(1, 3)].lfs.sha256
    # The library's own safetensors parser reads every shard header with Range requests.
    meta = api.get_safetensors_metadata(REPO_ID)
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    assert meta.sharded and meta.weight_map == index["weight_map"]
    assert meta.parameter_count == api.model_info(REPO_ID).safetensors.parameters
    assert hub.stats()["range_requests"] >= 3


def test_errors_map_to_the_library_exceptions(hf, hub, tmp_path):
    api = hf.HfApi(endpoint=hub.url)
    with pytest.raises(hf.errors.RepositoryNotFoundError):
        api.model_info("sparklab/no-such-model")
    with pytest.raises(hf.errors.RevisionNotFoundError):
        api.model_info(REPO_ID, revision="v9")
    with pytest.raises(hf.errors.RemoteEntryNotFoundError):
        hf.hf_hub_download(REPO_ID, "nope.json", local_dir=tmp_path, cache_dir=tmp_path / "c", endpoint=hub.url)


def test_resolve_speaks_http_ranges(hub, ckpt):
    url = f"{hub.url}/{REPO_ID}/resolve/main/{shard_name(1, 3)}"
    data = (ckpt / shard_name(1, 3)).read_bytes()

    head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"))
    assert head.headers["X-Repo-Commit"] == hub.commit
    assert head.headers["X-Linked-Etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert int(head.headers["X-Linked-Size"]) == len(data) == int(head.headers["Content-Length"])
    assert head.headers["Accept-Ranges"] == "bytes"

    for spec, expected in (("bytes=10-19", data[10:20]), ("bytes=-5", data[-5:]), (f"bytes={len(data) - 3}-", data[-3:])):
        resp = urllib.request.urlopen(urllib.request.Request(url, headers={"Range": spec}))
        assert resp.status == 206 and resp.read() == expected, spec
        assert resp.headers["Content-Range"].endswith(f"/{len(data)}")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={len(data)}-"}))
    assert err.value.code == 416 and err.value.headers["Content-Range"] == f"bytes */{len(data)}"


# -- snapshot_download ----------------------------------------------------------------------


def test_snapshot_into_a_real_directory_is_byte_identical(hf, hub, ckpt, tmp_path):
    dest = tmp_path / "model"
    assert _download(hf, hub, dest, revision="main") == str(dest)
    _assert_identical(ckpt, dest)
    links = [p for p in tmp_path.rglob("*") if p.is_symlink()]
    assert links == [], "local_dir downloads must not go through the symlinked cache"
    assert not list((tmp_path / "model-cache").rglob("blobs")), "nothing stored in the blob cache"
    assert not list(dest.rglob("*.incomplete"))

    # A re-run pinned to the commit finds every file in place: no content is fetched again.
    served = hub.stats()["bytes_served"]
    _download(hf, hub, dest, revision=hub.commit)
    assert hub.stats()["bytes_served"] == served


def test_a_second_repo_is_served_beside_the_first_with_its_own_commit_and_counters(hf, ckpt, tmp_path):
    """The lab serves the second lab profile's checkpoint from the same stand-in (sparklab hub start)."""
    other = tmp_path / "other"
    make_checkpoint(other, shards=2, shard_bytes=MIB, seed=9, workers=1)
    with HubStub(ckpt, REPO_ID, extra_repos=[(other, "sparklab/other")],
                 index_cache=str(tmp_path / "index.json")) as server:
        first = _download(hf, server, tmp_path / "first")
        second = hf.snapshot_download("sparklab/other", local_dir=tmp_path / "second",
                                      cache_dir=tmp_path / "second-cache", endpoint=server.url)
        _assert_identical(ckpt, Path(first))
        _assert_identical(other, Path(second))
        commits = {hf.HfApi(endpoint=server.url).model_info(r).sha for r in (REPO_ID, "sparklab/other")}
        assert len(commits) == 2
        files = server.stats()["files"]
        assert files[shard_name(1, 3)]["gets"] == 1
        assert files[f"sparklab/other/{shard_name(1, 2)}"]["gets"] == 1
        with pytest.raises(hf.errors.RepositoryNotFoundError):
            hf.HfApi(endpoint=server.url).model_info("sparklab/absent")
    # One hash cache per repo: same file names, other bytes.
    assert (tmp_path / "index.json").is_file() and (tmp_path / "index.json.sparklab--other").is_file()


def test_allow_patterns_limit_the_download(hf, hub, ckpt, tmp_path):
    dest = tmp_path / "json-only"
    _download(hf, hub, dest, allow_patterns=["*.json"])
    _assert_identical(ckpt, dest, only=lambda name: name.endswith(".json"))
    assert not any(name.endswith(".safetensors") for name in hub.stats()["files"])


def test_cut_mid_file_is_resumed_with_a_range_request(hf, big_ckpt, tmp_path):
    shard = shard_name(2, 2)
    size = (big_ckpt / shard).stat().st_size
    cut_at = 11 * MIB
    assert size > cut_at
    with HubStub(big_ckpt, REPO_ID) as server:
        server.set_faults(cut_after_bytes=cut_at, cut_path=shard, cut_times=1)
        dest = tmp_path / "model"
        _download(hf, server, dest)
        stats = server.stats()
    _assert_identical(big_ckpt, dest)
    per_file = stats["files"][shard]
    assert per_file["cuts"] == 1 and per_file["full_gets"] == 1 and per_file["range_gets"] == 1
    assert per_file["bytes_served"] < 2 * size
    ranges = [entry["range"] for entry in stats["log"] if entry["range"] and entry["path"].endswith(shard)]
    start = int(ranges[0].split("=")[1].rstrip("-"))
    # The client keeps what it had written (whole 10 MiB chunks) and asks for the rest.
    assert 0 < start <= cut_at and start % (10 * MIB) == 0


def test_failed_run_leaves_no_partial_and_the_rerun_fetches_only_that_file(hf, big_ckpt, tmp_path):
    """huggingface_hub 2.4.0 resumes within one call only: a failed file is deleted, a re-run restarts it."""
    shard = shard_name(2, 2)
    size = (big_ckpt / shard).stat().st_size
    with HubStub(big_ckpt, REPO_ID) as server:
        # Cut the transfer, then refuse the resume: the first run fails on this file.
        server.set_faults(cut_after_bytes=11 * MIB, cut_path=shard, fail_status=503, fail_path=shard, fail_only_ranges=True)
        dest = tmp_path / "model"
        with pytest.raises(hf.errors.HfHubHTTPError):
            _download(hf, server, dest)
        assert not (dest / shard).exists()
        assert not [p for p in dest.rglob("*") if p.name.endswith(".incomplete")]
        first = server.stats()["files"]

        _download(hf, server, dest)
        second = server.stats()["files"]
    _assert_identical(big_ckpt, dest)
    assert second[shard]["full_gets"] == 2 and second[shard]["range_gets"] == first[shard]["range_gets"] == 1
    assert second[shard]["bytes_served"] == 11 * MIB + size
    for name, counters in second.items():
        if name != shard:
            assert counters["gets"] == first[name]["gets"] == 1, f"{name} fetched again"


def test_throttle_caps_the_aggregate_rate(hf, hub, ckpt, tmp_path):
    rate = 6 * MIB
    hub.set_faults(throttle_bytes_per_s=rate)  # global scope: the three shards share it
    start = time.monotonic()
    _download(hf, hub, tmp_path / "model", allow_patterns=["*.safetensors"])
    elapsed = time.monotonic() - start
    moved = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    measured = moved / elapsed
    assert rate / 2 <= measured <= 2 * rate, f"{measured / MIB:.1f} MiB/s with a {rate / MIB:.0f} MiB/s throttle"


# -- auth and redirects ---------------------------------------------------------------------


def test_token_is_required_and_checked(hf, ckpt, tmp_path):
    with HubStub(ckpt, REPO_ID, token=TOKEN) as server:
        api = hf.HfApi(endpoint=server.url)
        with pytest.raises(hf.errors.HfHubHTTPError) as wrong:
            api.model_info(REPO_ID, token="hf_wrong")
        assert wrong.value.response.status_code == 401
        assert not isinstance(wrong.value, hf.errors.RepositoryNotFoundError)
        with pytest.raises(hf.errors.RepositoryNotFoundError):
            api.model_info(REPO_ID, token=False)

        with pytest.raises(hf.errors.HfHubHTTPError) as failed:
            _download(hf, server, tmp_path / "model", token="hf_wrong")
        assert failed.value.response.status_code == 401

        _download(hf, server, tmp_path / "model", token=TOKEN)
        _assert_identical(ckpt, tmp_path / "model")

        # With files already in local_dir, an auth failure (like the hub being unreachable) is
        # not raised as such: the library falls back to what is on disk. It notices a missing
        # file only if it finds the ref of the earlier run in cache_dir; with another cache_dir
        # it returns the incomplete directory after a logged warning. Callers must verify.
        dest = tmp_path / "model"
        (dest / shard_name(3, 3)).unlink()
        with pytest.raises(hf.errors.IncompleteSnapshotError):
            _download(hf, server, dest, token="hf_wrong")
        returned = hf.snapshot_download(REPO_ID, local_dir=dest, cache_dir=tmp_path / "other-cache", endpoint=server.url, token="hf_wrong")
        assert returned == str(dest) and not (dest / shard_name(3, 3)).exists()
        assert server.stats()["auth"]["wrong"] >= 3


def test_lfs_redirect_to_the_cdn_port_drops_the_token(hf, ckpt, tmp_path):
    with HubStub(ckpt, REPO_ID, token=TOKEN, lfs_redirect=True) as server:
        _download(hf, server, tmp_path / "model", token=TOKEN)
        stats = server.stats()
    _assert_identical(ckpt, tmp_path / "model")
    assert stats["by_route"]["cdn"] == 3  # the three shards came from the "CDN"
    assert stats["status"]["302"] == 3  # one HEAD per shard answered with a redirect
    assert stats["cdn_requests_with_authorization"] == 0


# -- the CLI, HF_ENDPOINT and the control endpoints -----------------------------------------

CLIENT = textwrap.dedent(
    """
    import json, socket, ipaddress
    seen, outside = [], []
    real_connect = socket.socket.connect
    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not ipaddress.ip_address(address[0]).is_loopback:
            outside.append(str(address))
            raise ConnectionRefusedError(address)
        return real_connect(sock, address)
    socket.socket.connect = connect

    import huggingface_hub
    from huggingface_hub.utils._http import default_client_factory
    def factory():
        client = default_client_factory()
        client.event_hooks["request"].append(lambda request: seen.append(str(request.url)))
        return client
    huggingface_hub.set_client_factory(factory)

    import sys
    dest = sys.argv[1]
    huggingface_hub.snapshot_download("REPO", local_dir=dest, cache_dir=dest + "-cache")  # no endpoint argument
    info = huggingface_hub.HfApi().model_info("REPO", files_metadata=True)
    print(json.dumps({"requests": seen, "outside": outside, "sha": info.sha}))
    """
).replace("REPO", REPO_ID)


def _http_json(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method)) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_cli_stub_with_hf_endpoint_sees_every_client_request(ckpt, tmp_path):
    port_file = tmp_path / "port"
    server = subprocess.Popen(
        [sys.executable, hubstub.__file__, "--root", str(ckpt), "--repo", REPO_ID]
        + ["--port", "0", "--port-file", str(port_file)],
        env={**os.environ, "HUBSTUB_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if server.poll() is not None:
                pytest.fail(f"hubstub exited: {server.stdout.read()}")
            assert time.monotonic() < deadline, "no port file after 20 s"
            time.sleep(0.05)
        base = f"http://127.0.0.1:{int(port_file.read_text())}"

        # Control endpoints: validation, arming, reading back, clearing.
        assert _http_json("POST", f"{base}/_stub/faults", {"cut_afterbytes": 1})[0] == 400
        status, state = _http_json("POST", f"{base}/_stub/faults", {"throttle_bytes_per_s": 1e9, "cut_after_bytes": 1, "cut_path": "x"})
        assert status == 200 and state["throttle_bytes_per_s"] == 1e9 and state["cut_remaining"] == 1
        assert _http_json("POST", f"{base}/_stub/faults", {"reset": True})[1]["throttle_bytes_per_s"] is None

        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_", "TRANSFORMERS_"))}
        env.update(HF_ENDPOINT=base, HF_HOME=str(tmp_path / "hf_home"), HF_TOKEN=TOKEN)
        env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, str(tmp_path / "model")], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert client.returncode == 0, client.stderr
        report = json.loads(client.stdout.strip().splitlines()[-1])
        _, stats = _http_json("GET", f"{base}/_stub/stats")
        _, info = _http_json("GET", f"{base}/_stub/info")
    finally:
        server.terminate()
        server.wait(timeout=10)

    assert report["outside"] == []
    assert report["requests"] and all(url.startswith(base + "/") for url in report["requests"])
    assert stats["requests"] == len(report["requests"]), "the stub saw every request the client made"
    assert stats["auth"] == {"ok": len(report["requests"]), "missing": 0, "wrong": 0}
    assert report["sha"] == info["commit"]
    _assert_identical(ckpt, tmp_path / "model")


# -- gated repos ----------------------------------------------------------------------------

GRANTED = "hf_stub_granted_0123"


def test_gated_repo_answers_like_the_hub(hf, hub, ckpt, tmp_path):
    """Gated: metadata public, content 401 GatedRepo without a token, 403 with a token not granted."""
    hub.set_faults(gated="manual", gated_tokens=[GRANTED])
    api = hf.HfApi(endpoint=hub.url)
    info = api.model_info(REPO_ID, files_metadata=True, token=False)
    assert info.gated == "manual" and len(info.siblings) == len(_files(ckpt))
    assert [f.path for f in api.list_repo_tree(REPO_ID, token=False)]

    def fetch(token):
        return hf.hf_hub_download(REPO_ID, "config.json", local_dir=tmp_path / "d", cache_dir=tmp_path / "c",
                                  endpoint=hub.url, token=token)

    with pytest.raises(hf.errors.GatedRepoError) as anonymous:
        fetch(False)
    assert anonymous.value.response.status_code == 401
    assert "You must have access to it and be authenticated" in anonymous.value.server_message
    with pytest.raises(hf.errors.GatedRepoError) as denied:
        fetch("hf_not_granted")
    assert denied.value.response.status_code == 403
    assert "not in the authorized list" in denied.value.server_message
    assert filecmp.cmp(fetch(GRANTED), ckpt / "config.json", shallow=False)
    # The granted download is a HEAD and a GET.
    assert hub.stats()["gated"] == {"unauthenticated": 1, "denied": 1, "granted": 2}

    # Gating the metadata too: model_info itself raises.
    hub.set_faults(gated_metadata=True)
    with pytest.raises(hf.errors.GatedRepoError):
        api.model_info(REPO_ID, token=False)
    # reset lifts the gate.
    hub.reset()
    assert api.model_info(REPO_ID, token=False).gated is False


def test_gate_settings_are_validated(hub):
    base = hub.url
    assert _http_json("POST", f"{base}/_stub/faults", {"gated": "yes"})[0] == 400
    assert _http_json("POST", f"{base}/_stub/faults", {"gated_tokens": "hf_x"})[0] == 400
    assert _http_json("POST", f"{base}/_stub/faults", {"gated_metadata": 1})[0] == 400
    status, state = _http_json("POST", f"{base}/_stub/faults", {"gated": "auto", "gated_tokens": [GRANTED]})
    assert status == 200 and state["gated"] == "auto" and state["gated_tokens"] == [GRANTED]
    assert _http_json("POST", f"{base}/_stub/faults", {"reset": True})[1]["gated"] is None


def test_model_info_can_answer_a_server_error_while_files_still_download(hf, hub, ckpt, tmp_path):
    api = hf.HfApi(endpoint=hub.url)
    hub.set_faults(model_info_status=503)
    with pytest.raises(hf.errors.HfHubHTTPError) as failed:
        api.model_info(REPO_ID, token=False)
    assert failed.value.response.status_code == 503
    assert _http_json("POST", f"{hub.url}/_stub/faults", {"model_info_status": "down"})[0] == 400
    fetched = hf.hf_hub_download(REPO_ID, "config.json", local_dir=tmp_path, endpoint=hub.url, token=False)
    assert filecmp.cmp(fetched, ckpt / "config.json", shallow=False)
    hub.reset()
    assert api.model_info(REPO_ID, token=False).sha


def test_cli_serves_a_gated_repo(ckpt, tmp_path):
    port_file = tmp_path / "port"
    server = subprocess.Popen(
        [sys.executable, hubstub.__file__, "--root", str(ckpt), "--repo", REPO_ID, "--port", "0",
         "--port-file", str(port_file), "--gated", "auto", "--gated-token", GRANTED],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "no port file after 20 s"
            time.sleep(0.05)
        base = f"http://127.0.0.1:{int(port_file.read_text())}"
        assert _http_json("GET", f"{base}/_stub/faults")[1]["gated"] == "auto"
        url = f"{base}/{REPO_ID}/resolve/main/config.json"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"))
        assert refused.value.code == 401 and refused.value.headers["X-Error-Code"] == "GatedRepo"
        granted = urllib.request.urlopen(urllib.request.Request(url, method="HEAD", headers={"Authorization": f"Bearer {GRANTED}"}))
        assert granted.status == 200
    finally:
        server.terminate()
        server.wait(timeout=10)


# -- Xet -------------------------------------------------------------------------------------------


SHARD = shard_name(1, 3)


def test_xet_is_advertised_like_the_hub(hf, hub, ckpt, monkeypatch):
    """With `xet`, LFS files carry the hub's Xet headers and tree field, and the token route answers
    with a CAS URL; the library's default (hf_xet installed, Xet on) takes that path and, the CAS
    not being implemented, fails at the stand-in's CAS instead of downloading over HTTP."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    hub.set_faults(xet=True)
    url = hub.url
    repo_file = hub.repo.files[SHARD]
    meta = hf.get_hf_file_metadata(hf.hf_hub_url(REPO_ID, SHARD, endpoint=url))
    assert meta.xet_file_data.file_hash == repo_file.xet_hash
    assert meta.xet_file_data.refresh_route == f"{url}/api/models/{REPO_ID}/xet-read-token/{hub.commit}"
    # Small git files are never in Xet.
    assert hf.get_hf_file_metadata(hf.hf_hub_url(REPO_ID, "config.json", endpoint=url)).xet_file_data is None
    tree = {f.path: f for f in hf.HfApi(endpoint=url).list_repo_tree(REPO_ID, recursive=True)}
    assert tree[SHARD].xet_hash == repo_file.xet_hash and tree["config.json"].xet_hash is None
    status, token = _http_json("GET", meta.xet_file_data.refresh_route)
    assert status == 200 and token["casUrl"] == f"{url}/xet-cas" and token["accessToken"].startswith("xet_stub_")

    hub.hub.reset_stats()
    with pytest.raises(Exception, match="501"):
        hf.hf_hub_download(REPO_ID, SHARD, local_dir=str(Path(hub.repo.root).parent / "xet-default"),
                           endpoint=url)
    stats = hub.settled_stats(lambda s: s["by_route"].get("xet_cas"))
    assert stats["by_route"].get("xet_cas", 0) >= 1 and stats["files"].get(SHARD, {}).get("gets", 0) == 0
    # Off again: the stand-in answers like a repo kept in LFS.
    hub.set_faults(xet=False)
    assert hf.get_hf_file_metadata(hf.hf_hub_url(REPO_ID, SHARD, endpoint=url)).xet_file_data is None
    assert _http_json("GET", meta.xet_file_data.refresh_route)[0] == 404


def test_the_checkpoint_transfer_turns_xet_off_and_downloads_over_http(hf, ckpt, tmp_path, monkeypatch):
    """The hub advertises Xet (behind its CDN redirect, as for the hub's large files); the pipeline's
    transfer disables Xet and downloads every file over the resolve route: byte-identical, no
    request to the Xet token route or the CAS, no Xet cache written."""
    from ansible_collections.sparkctl.spark.plugins.module_utils import checkpoint_sync
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "0")
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(tmp_path / "xet-cache"))
    with HubStub(ckpt, REPO_ID, lfs_redirect=True, faults={"xet": True}) as server:
        sync = checkpoint_sync.CheckpointSync(
            {"type": "hub", "repo_id": REPO_ID, "revision": "main", "endpoint": server.url}, str(tmp_path / "head"),
            workers=[], mirror=False, racy_window_ns=0)
        result = sync.run()
        stats = server.settled_stats(lambda s: s["by_route"].get("cdn", 0) >= 3)
    assert result["failures"] == [], result["failures"]
    assert os.environ["HF_HUB_DISABLE_XET"] == "1" and constants.HF_HUB_DISABLE_XET is True
    for name, path in _files(ckpt).items():
        assert filecmp.cmp(path, tmp_path / "head" / name, shallow=False), name
    assert "xet_token" not in stats["by_route"] and "xet_cas" not in stats["by_route"], stats["by_route"]
    assert stats["by_route"]["cdn"] == 3  # the three shards, over HTTP from the "CDN"
    assert not (tmp_path / "xet-cache").exists()


def test_xet_setting_is_validated(hub):
    assert _http_json("POST", f"{hub.url}/_stub/faults", {"xet": "yes"})[0] == 400
    assert _http_json("POST", f"{hub.url}/_stub/faults", {"xet": True})[1]["xet"] is True
    hub.reset()
