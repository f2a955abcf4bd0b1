# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Can the head read the checkpoint's repo on the hub with the token it was given?

Asked before any host changes (preflight, and first thing in the checkpoint stage), so
a gated or private repo without a usable token, or a hub that lists the repo but will
not hand out its files, is refused with the variable and the fix instead of failing
mid-download. Two read-only requests with the standard library (no huggingface_hub:
preflight runs before the checkpoint stage installs it):

1. ``GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true``: the repo and revision
   exist, the metadata says whether the repo is gated, and lists the files with their LFS
   data;
2. ``GET {endpoint}/{repo}/resolve/{rev}/{file}`` with ``Range: bytes=0-0`` on one LFS file
   (a weight shard), following redirects as huggingface_hub does: large files come from
   another host (the hub's CDN, or its Xet storage bridge), and a hub whose metadata
   answers can still refuse them (a proxy that blocks the storage host, a token that may
   list but not read, a storage outage). Reading one byte proves the download works; a
   HEAD or an unfollowed 302 does not. The hub answers 401/403 ``X-Error-Code: GatedRepo``
   when the token may not download (metadata of a gated repo is public; its content is not).

Only the redirects the download follows are followed: 301, 302, 303, 307 and 308 with a
Location to http(s), at most MAX_REDIRECTS in a row. Any other 3xx (a 300, 304 or 305, one
without a Location, one to another scheme, one past the limit or in a loop) fails the check
naming the URL that answered it and its status: the download would not get the file either,
so the answer can be neither a pass nor a hub that is merely out of reach.

The token goes into the Authorization header for the endpoint's own origin only (a
redirect to another host goes without it, as huggingface_hub does), never over cleartext
HTTP to another machine (endpoint_problem), and no result or message holds it."""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
import urllib.error
import urllib.request
from urllib.parse import quote, urljoin, urlsplit

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "sparkctl-hub-access/1"
# Tried when the hub lists no LFS file (a repo of small files): present in every model repo.
PREFERRED_FILES = ("config.json", "model.safetensors.index.json")
# Weight files by name, for a hub whose file list carries no LFS data.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
# At most this many redirects between the hub and the byte (hub -> CDN or storage bridge).
MAX_REDIRECTS = 5
# What the download follows; every other 3xx answer is refused (unfollowed_redirect).
FOLLOWED_REDIRECTS = (301, 302, 303, 307, 308)
FOLLOWED_SCHEMES = ("http", "https")


def _origin(url):
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


class _UnfollowedRedirect(urllib.error.HTTPError):
    """A redirect the probe refuses to follow, with why in words (unfollowed_redirect)."""

    def __init__(self, url, code, why, headers, fp):
        super().__init__(url, code, why, headers, fp)
        self.why = why


class _RedirectWithoutCredentials(urllib.request.HTTPRedirectHandler):
    """Follows the hub's redirects to where it keeps large files, and records each hop. The
    Authorization header stays with the origin it was given for: the CDN's pre-signed URL
    needs no token, and another host must never see it (huggingface_hub behaves the same).

    A redirect the download would not follow is refused here with why: one with no Location
    header (urllib would read a URI header instead, or give up without saying why), one to a
    scheme other than http(s) (urllib would follow ftp:// too), one past MAX_REDIRECTS in a
    row, loops included (urllib's own limits are set above these so the refusal is always
    this one)."""

    max_redirections = MAX_REDIRECTS + 1
    max_repeats = MAX_REDIRECTS + 1

    def __init__(self):
        super().__init__()
        self.hops = []

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("Location")
        if not location:
            raise _UnfollowedRedirect(req.full_url, code, "a redirect with no Location header", headers, fp)
        target = urljoin(req.full_url, location)
        if urlsplit(target).scheme.lower() not in FOLLOWED_SCHEMES:
            raise _UnfollowedRedirect(req.full_url, code, f"a redirect to {target}, which is not http(s)", headers,
                                      fp)
        followed = sum(getattr(req, "redirect_dict", {}).values())
        if followed >= MAX_REDIRECTS:
            raise _UnfollowedRedirect(req.full_url, code, f"redirect {followed + 1} in a row, more than the "
                                      f"{MAX_REDIRECTS} the check follows (a loop, or a longer chain than a hub's)",
                                      headers, fp)
        return super().http_error_302(req, fp, code, msg, headers)

    # urllib binds these to its own http_error_302: each must reach the checks above.
    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 (urllib's signature)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            self.hops.append(newurl)
            if _origin(newurl) != _origin(req.full_url):
                new.remove_header("Authorization")
        return new


def is_loopback_host(host):
    """Whether host (a name or an address, IPv6 with or without brackets) stays on this machine."""
    host = (host or "").strip().strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def _split_endpoint(endpoint):
    """(scheme, host) of an endpoint URL; empty strings when it does not parse."""
    try:
        parts = urlsplit(endpoint.strip())
        parts.port  # noqa: B018 (raises ValueError on a malformed port)
    except ValueError:
        return "", ""
    return parts.scheme.lower(), parts.hostname or ""


# The options of the modules that ask the hub (hub_access, checkpoint_fit), documented once in the
# sparkctl.spark.hub doc fragment; hub_options reads them.
HUB_ARGUMENT_SPEC = dict(
    token=dict(type="str", no_log=True),
    endpoint=dict(type="str"),
)


def hub_options(params, environ=None):
    """(token, endpoint) from a module's HUB_ARGUMENT_SPEC options: an empty token asks anonymously
    (None), an empty endpoint is the node's HF_ENDPOINT, else None (the real hub)."""
    environ = os.environ if environ is None else environ
    return params["token"] or None, params["endpoint"] or environ.get("HF_ENDPOINT") or None


def endpoint_problem(endpoint, token):
    """Why spark_hf_endpoint cannot be used as given, or None. A token goes over cleartext HTTP
    only to a hub on the node's own loopback (a local mirror or a test double): anywhere else
    anyone on the path reads it. Empty means the real hub (https). The message names the
    variable and the fix, never the token."""
    if endpoint is None or endpoint == "":
        return None
    if not isinstance(endpoint, str):
        return f"'spark_hf_endpoint' must be a URL such as https://hf-mirror.example.com, got {type(endpoint).__name__}."
    scheme, host = _split_endpoint(endpoint)
    if scheme not in ("http", "https") or not host:
        return (f"'spark_hf_endpoint' {endpoint!r} is not an http(s) URL: give the hub's base URL, e.g. "
                "https://hf-mirror.example.com, or leave it empty for the real hub.")
    if token and scheme == "http" and not is_loopback_host(host):
        return (f"'spark_hf_endpoint' {endpoint!r} is plain http to {host} while 'spark_hf_token' is set, so the token "
                "would cross the network in clear text: use https:// for the hub or mirror, or leave spark_hf_token "
                "empty for a mirror that needs none (plain http with a token is accepted on loopback only: "
                "127.0.0.0/8, ::1, localhost).")
    return None


def _default_opener(redirects=None):
    return urllib.request.build_opener(redirects or _RedirectWithoutCredentials())


def _answer(status, headers, body=b"", url=None, unfollowed_redirect=None):
    headers = headers or {}
    return {
        "status": status,
        "error_code": headers.get("X-Error-Code"),
        "error_message": headers.get("X-Error-Message"),
        "body": body,
        "url": url,
        "unfollowed_redirect": unfollowed_redirect,
    }


def _unfollowed_redirect(err, url):
    """{url, status, why} of a 3xx answer that ended a request unfollowed: refused by the redirect
    handler (why given), or one urllib does not follow at all (300, 304, 305, ...)."""
    why = getattr(err, "why", None)
    if why is None:
        if err.code not in FOLLOWED_REDIRECTS:
            codes = ", ".join(str(code) for code in FOLLOWED_REDIRECTS[:-1])
            why = (f"which is not a redirect the download follows ({codes} or {FOLLOWED_REDIRECTS[-1]} with a "
                   "Location header)")
        else:
            why = "a redirect the check did not follow"
    phrase = http.client.responses.get(err.code)
    return {"url": url, "status": err.code, "why": f"({phrase}), {why}" if phrase else why}


def _request(opener, method, url, token, timeout, extra_headers=None, read_limit=None):
    """(answer, None) for any HTTP answer, (None, reason) when the hub could not be reached.
    read_limit: read at most that many bytes of the body (the probe wants one)."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    headers.update(extra_headers or {})
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with opener.open(request, timeout=timeout) as response:
            if method != "GET":
                body = b""
            else:
                body = response.read(read_limit) if read_limit is not None else response.read()
            return _answer(response.status, response.headers, body, response.geturl()), None
    except urllib.error.HTTPError as err:
        answered = getattr(err, "url", None) or url
        unfollowed = _unfollowed_redirect(err, answered) if 300 <= err.code < 400 else None
        answer = _answer(err.code, err.headers, url=answered, unfollowed_redirect=unfollowed)
        try:
            err.close()
        except (OSError, ValueError):
            pass
        return answer, None
    except (urllib.error.URLError, socket.timeout, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason) or type(exc).__name__


def _probe_file(siblings):
    """The file whose first byte is read: an LFS file (a weight shard; .safetensors first, then
    by name), else a file named like weights, else a small file every repo has."""
    entries = [s for s in siblings or [] if isinstance(s, dict) and isinstance(s.get("rfilename"), str) and s["rfilename"]]
    names = sorted(s["rfilename"] for s in entries)
    lfs = sorted(s["rfilename"] for s in entries
                 if isinstance(s.get("lfs"), dict) and (s["lfs"].get("size") or s.get("size") or 1) > 0)
    by_suffix = [n for n in names if n.endswith(LFS_SUFFIXES)]
    for candidates in (lfs, by_suffix):
        if candidates:
            return next((n for n in candidates if n.endswith(".safetensors")), candidates[0])
    return next((n for n in PREFERRED_FILES if n in names), None) or (names[0] if names else None)


def _scrub(text, token):
    text = "" if text is None else str(text)
    return text.replace(token, "***") if token else text


def probe(repo_id, revision, token=None, endpoint=None, timeout=15, opener=None):
    """Ask the hub; returns a plain dict (no token in it) for verdict()."""
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    token = token or None
    redirects = _RedirectWithoutCredentials()
    opener = opener or _default_opener(redirects)
    rev = quote(str(revision), safe="")
    result = {
        "endpoint": base,
        "repo_id": repo_id,
        "revision": revision,
        "token_given": bool(token),
        "endpoint_problem": endpoint_problem(endpoint, token),
        "reachable": True,
        "reason": None,
        "info_status": None,
        "info_error_code": None,
        "info_error_message": None,
        "gated": False,
        "commit": None,
        "files": None,
        "file": None,
        "content_status": None,
        "content_error_code": None,
        "content_error_message": None,
        "download_host": None,
        "redirects": 0,
        "unfollowed_redirect": None,
    }
    if result["endpoint_problem"]:
        return result  # nothing is sent: the token would cross the network in clear text
    info, reason = _request(opener, "GET", f"{base}/api/models/{repo_id}/revision/{rev}?blobs=true", token, timeout)
    if info is None:
        result.update(reachable=False, reason=_scrub(reason, token))
        return result
    result.update(info_status=info["status"], info_error_code=info["error_code"],
                  info_error_message=_scrub(info["error_message"], token),
                  unfollowed_redirect=_scrubbed_redirect(info["unfollowed_redirect"], "info", token))
    if info["status"] != 200:
        return result
    try:
        data = json.loads(info["body"] or b"{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    result["gated"] = data.get("gated") or False
    result["commit"] = data.get("sha")
    # The repo's file names at that commit: the checkpoint stage compares them with the manifest
    # an earlier run kept (after allow_patterns) instead of reading the hub's file list again.
    siblings = data.get("siblings") if isinstance(data.get("siblings"), list) else []
    result["files"] = sorted(s["rfilename"] for s in siblings if isinstance(s, dict) and isinstance(s.get("rfilename"), str))
    wanted = _probe_file(data.get("siblings"))
    result["file"] = wanted
    if wanted is None:
        return result
    hops_before = len(redirects.hops)
    content, reason = _request(opener, "GET", f"{base}/{repo_id}/resolve/{rev}/{quote(wanted)}", token, timeout,
                               extra_headers={"Range": "bytes=0-0", "Accept": "*/*"}, read_limit=1)
    hops = redirects.hops[hops_before:]
    last_url = (content or {}).get("url") or (hops[-1] if hops else base)
    result.update(redirects=len(hops), download_host=urlsplit(last_url).netloc or None)
    if content is None:
        where = f" (redirected to {result['download_host']})" if hops else ""
        result.update(reachable=False, reason=_scrub(f"{reason}{where}", token))
        return result
    result.update(content_status=content["status"], content_error_code=content["error_code"],
                  content_error_message=_scrub(content["error_message"], token),
                  unfollowed_redirect=_scrubbed_redirect(content["unfollowed_redirect"], "content", token))
    return result


def _scrubbed_redirect(unfollowed, request, token):
    """unfollowed_redirect of one request for the result: which request, and no token in its text."""
    if unfollowed is None:
        return None
    return {"request": request, "url": _scrub(unfollowed["url"], token), "status": unfollowed["status"],
            "why": _scrub(unfollowed["why"], token)}


def _page(result):
    return f"{result['endpoint']}/{result['repo_id']}"


def _refusal(result):
    """(request, status, error code, message) of the first request the hub refused, or None;
    request is "info" (the metadata) or "content" (the byte of a file)."""
    if result["info_status"] is not None and result["info_status"] >= 400:
        return "info", result["info_status"], result["info_error_code"], result["info_error_message"]
    status = result["content_status"]
    # 416: the range is past the end of the file, which only an empty file answers; it exists.
    if status is not None and 400 <= status < 500 and status != 416:
        return "content", status, result["content_error_code"], result["content_error_message"]
    return None


def _from_host(result):
    """' from HOST' when the file's answer came from another host than the endpoint's."""
    host = result.get("download_host")
    if host and host != urlsplit(result["endpoint"]).netloc:
        return f" from {host}"
    return ""


def verdict(result):
    """{status: pass|fail|warn, detail, fix, message} for the probe's result; every failure names
    the variable to change (spark_hf_token, spark_checkpoint.repo_id, spark_checkpoint.revision).
    message is detail and fix in one sentence, for an assert's fail_msg."""
    judged = _verdict(result)
    detail, fix = judged["detail"], judged["fix"]
    judged["message"] = f"{detail.rstrip('.')}: {fix[:1].lower()}{fix[1:]}" if fix else detail
    return judged


def _verdict(result):
    repo, revision, token = result["repo_id"], result["revision"], result["token_given"]
    where = f"{repo}@{revision}"
    if result.get("endpoint_problem"):
        problem = result["endpoint_problem"]
        detail, _sep, fix = problem.partition(": ")
        return {"status": "fail", "detail": f"{detail}.", "fix": fix[:1].upper() + fix[1:]}
    if not result["reachable"]:
        return {
            "status": "warn",
            "detail": f"could not reach the hub at {result['endpoint']} to check {where}: {result['reason']}.",
            "fix": "Check the head's network, proxy and 'spark_hf_endpoint'; the checkpoint stage needs the hub "
                   "unless the checkpoint is already in place.",
        }
    unfollowed = result.get("unfollowed_redirect")
    if unfollowed:
        asked = "the metadata" if unfollowed["request"] == "info" else result["file"]
        return {
            "status": "fail",
            "detail": f"the hub did not hand out {asked} of {where}: {unfollowed['url']} answered "
                      f"{unfollowed['status']} {unfollowed['why']}.",
            "fix": "Check spark_hf_endpoint and any proxy between the head and the hub: the download needs the file, "
                   "or a plain redirect to it over http(s), and would stop at the same answer.",
        }
    refused = _refusal(result)
    if refused is None:
        status = result["content_status"]
        if status is not None and status >= 500:
            return {
                "status": "warn",
                "detail": f"the hub lists {where} but answered {status} when asked for {result['file']}"
                          f"{_from_host(result)}.",
                "fix": "Retry later; the checkpoint stage asks the hub again before it writes anything.",
            }
        gated = f" (gated: {result['gated']}, the token has access)" if result["gated"] else ""
        return {"status": "pass", "detail": f"{where} is readable on {result['endpoint']}{gated}", "fix": ""}
    request, status, code, message = refused
    said = f"{status}{': ' + message if message else ''}"
    if code == "GatedRepo" or (result["gated"] and status in (401, 403)):
        if not token:
            return {
                "status": "fail",
                "detail": f"spark_hf_token is empty but {repo} is gated on the hub ({status}).",
                "fix": f"Set HF_TOKEN on the control node or vault spark_hf_token, a token of an account that "
                       f"accepted the model's terms at {_page(result)}.",
            }
        if status == 403:
            return {
                "status": "fail",
                "detail": f"spark_hf_token has no access to {repo}, which is gated on the hub (403).",
                "fix": f"Accept the model's terms at {_page(result)} with the token's account, or set spark_hf_token "
                       "(HF_TOKEN on the control node, or vaulted) to a token that has access.",
            }
        return {
            "status": "fail",
            "detail": f"the hub refused spark_hf_token for {repo}, which is gated ({said}).",
            "fix": "Set spark_hf_token (HF_TOKEN on the control node, or vaulted) to a valid token of an account that "
                   f"accepted the model's terms at {_page(result)}.",
        }
    if status == 401 and message == INVALID_CREDENTIALS and token:
        return {
            "status": "fail",
            "detail": f"spark_hf_token is not a valid hub token ({said}).",
            "fix": f"Create a read token at {result['endpoint']}/settings/tokens and set HF_TOKEN on the control "
                   "node or vault spark_hf_token.",
        }
    if code == "RevisionNotFound":
        return {
            "status": "fail",
            "detail": f"spark_checkpoint.revision {revision!r} does not exist in {repo} ({said}).",
            "fix": "Pin an existing commit sha (or branch) of the repo in spark_checkpoint.revision "
                   "(or the profile's checkpoint.revision).",
        }
    if request == "content" and status in (401, 403, 404):
        host = result.get("download_host") or urlsplit(result["endpoint"]).netloc
        fix = (f"The download would fail the same way. Check that the head's proxy or firewall lets it fetch from "
               f"{host} (the hub hands large files out from other hosts than its own) and that spark_hf_endpoint "
               "points at a hub that serves files")
        fix += (", and that spark_hf_token's account may read the repo's files (a fine-grained token needs read "
                "access to this repo)." if token else
                "; if the repo needs a login, set HF_TOKEN on the control node or vault spark_hf_token.")
        return {
            "status": "fail",
            "detail": f"the hub lists {where} but refused to download {result['file']} ({said}){_from_host(result)}.",
            "fix": fix,
        }
    if code == "RepoNotFound" or status in (401, 403, 404):
        if not token:
            return {
                "status": "fail",
                "detail": f"spark_checkpoint.repo_id {repo} is not on the hub, or is private ({said}).",
                "fix": "Check the repo id (spark_checkpoint.repo_id or the profile's checkpoint.repo_id); for a "
                       "private repo set HF_TOKEN on the control node or vault spark_hf_token.",
            }
        return {
            "status": "fail",
            "detail": f"spark_checkpoint.repo_id {repo} was not found with the given spark_hf_token ({said}).",
            "fix": "Check the repo id (spark_checkpoint.repo_id or the profile's checkpoint.repo_id) and that "
                   "spark_hf_token's account can read it.",
        }
    return {
        "status": "warn",
        "detail": f"the hub answered {said} for {where}.",
        "fix": "Retry later; the checkpoint stage asks the hub again before it writes anything.",
    }
