# Copyright (c) sparkctl developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Can the head read the checkpoint's repo on the hub with the token it was given?

Asked before any host changes (preflight, and first thing in the checkpoint stage), so
a gated or private repo without a usable token is refused with the variable and the fix
instead of failing mid-download. Two read-only requests with the standard library (no
huggingface_hub: preflight runs before the checkpoint stage installs it):

1. ``GET {endpoint}/api/models/{repo}/revision/{rev}``: the repo and revision exist,
   the metadata says whether the repo is gated, and lists a file to try;
2. ``HEAD {endpoint}/{repo}/resolve/{rev}/{file}`` without following redirects: the
   hub answers 401/403 ``X-Error-Code: GatedRepo`` when the token may not download
   (metadata of a gated repo is public; its content is not).

The token goes into the Authorization header only; no result or message holds it."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from urllib.parse import quote

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "sparkctl-hub-access/1"
# Tried first as the probe file: small, present in every model repo.
PREFERRED_FILES = ("config.json", "model.safetensors.index.json")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx on resolve means the hub handed out the content (a CDN URL): access granted."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 (urllib's signature)
        return None


def _default_opener():
    return urllib.request.build_opener(_NoRedirect)


def _answer(status, headers, body=b""):
    headers = headers or {}
    return {
        "status": status,
        "error_code": headers.get("X-Error-Code"),
        "error_message": headers.get("X-Error-Message"),
        "body": body,
    }


def _request(opener, method, url, token, timeout):
    """(answer, None) for any HTTP answer, (None, reason) when the hub could not be reached."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read() if method == "GET" else b""
            return _answer(response.status, response.headers, body), None
    except urllib.error.HTTPError as err:
        answer = _answer(err.code, err.headers)
        try:
            err.close()
        except (OSError, ValueError):
            pass
        return answer, None
    except (urllib.error.URLError, socket.timeout, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason) or type(exc).__name__


def _scrub(text, token):
    text = "" if text is None else str(text)
    return text.replace(token, "***") if token else text


def probe(repo_id, revision, token=None, endpoint=None, timeout=15, opener=None):
    """Ask the hub; returns a plain dict (no token in it) for verdict()."""
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    token = token or None
    opener = opener or _default_opener()
    rev = quote(str(revision), safe="")
    result = {
        "endpoint": base,
        "repo_id": repo_id,
        "revision": revision,
        "token_given": bool(token),
        "reachable": True,
        "reason": None,
        "info_status": None,
        "info_error_code": None,
        "info_error_message": None,
        "gated": False,
        "commit": None,
        "file": None,
        "content_status": None,
        "content_error_code": None,
        "content_error_message": None,
    }
    info, reason = _request(opener, "GET", f"{base}/api/models/{repo_id}/revision/{rev}", token, timeout)
    if info is None:
        result.update(reachable=False, reason=_scrub(reason, token))
        return result
    result.update(info_status=info["status"], info_error_code=info["error_code"],
                  info_error_message=_scrub(info["error_message"], token))
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
    names = [s.get("rfilename") for s in data.get("siblings") or [] if isinstance(s, dict) and s.get("rfilename")]
    wanted = next((n for n in PREFERRED_FILES if n in names), None) or (sorted(names)[0] if names else None)
    result["file"] = wanted
    if wanted is None:
        return result
    content, reason = _request(opener, "HEAD", f"{base}/{repo_id}/resolve/{rev}/{quote(wanted)}", token, timeout)
    if content is None:
        result.update(reachable=False, reason=_scrub(reason, token))
        return result
    result.update(content_status=content["status"], content_error_code=content["error_code"],
                  content_error_message=_scrub(content["error_message"], token))
    return result


def _page(result):
    return f"{result['endpoint']}/{result['repo_id']}"


def _refusal(result):
    """(status, error code, message) of the first request the hub refused, or None."""
    if result["info_status"] is not None and result["info_status"] >= 400:
        return result["info_status"], result["info_error_code"], result["info_error_message"]
    status = result["content_status"]
    if status is not None and status in (401, 403):
        return status, result["content_error_code"], result["content_error_message"]
    return None


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
    if not result["reachable"]:
        return {
            "status": "warn",
            "detail": f"could not reach the hub at {result['endpoint']} to check {where}: {result['reason']}.",
            "fix": "Check the head's network, proxy and 'spark_hf_endpoint'; the checkpoint stage needs the hub "
                   "unless the checkpoint is already in place.",
        }
    refused = _refusal(result)
    if refused is None:
        gated = f" (gated: {result['gated']}, the token has access)" if result["gated"] else ""
        return {"status": "pass", "detail": f"{where} is readable on {result['endpoint']}{gated}", "fix": ""}
    status, code, message = refused
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
