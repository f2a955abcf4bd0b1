"""python -m sparkctl.bench: usage errors (exit 2, the flag and the fix named, no request
sent), the API key never taken from argv nor echoed, and the selftest command."""

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sparkctl.bench import cli

REPO = Path(__file__).resolve().parents[2]
BASE = ["run", "--url", "http://10.0.0.1:8000", "--model", "m"]


def assert_refused_before_any_request(tmp_path, capsys, no_network, extra, flag, fix):
    """`run` with extra flags exits 2, naming the flag and the fix, before any request and before writing its output."""
    calls, transport = no_network
    code = cli.main(BASE + ["--out", str(tmp_path / "out")] + extra, transport=transport)
    err = capsys.readouterr().err
    assert code == 2
    assert f"run: {flag}:" in err and fix in err, err
    assert calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, flag, fix", [
    (["--url", "ftp://10.0.0.1"], "--url", "--url http://"),
    (["--url", "10.0.0.1:8000"], "--url", "--url http://"),
    (["--url", "http://user:pw@10.0.0.1:8000"], "--url", "environment variable"),
    (["--url", "http://10.0.0.1:99999"], "--url", "fix the port"),
    (["--concurrency", "1,0,4"], "--concurrency", "--concurrency 1,2,4"),
    (["--concurrency", "two"], "--concurrency", "--concurrency 1,2,4"),
    (["--concurrency", ","], "--concurrency", "--concurrency 1,2,4"),
    (["--prompt-tokens", "2048,-5"], "--prompt-tokens", "--prompt-tokens 2048,8192,32768"),
    (["--max-tokens", "0"], "--max-tokens", "--max-tokens 128"),
    (["--max-tokens", "1"], "--max-tokens", "--max-tokens 128"),
    (["--requests-per-stream", "1.5"], "--requests-per-stream", "--requests-per-stream"),
    (["--warmup", "-1"], "--warmup", "--warmup 1"),
    (["--max-model-len", "abc"], "--max-model-len", "--max-model-len 262144"),
    (["--max-model-len", "100", "--max-tokens", "128"], "--max-tokens", "raise --max-model-len"),
    (["--timeout", "0"], "--timeout", "--timeout 600"),
    (["--timeout", "nan"], "--timeout", "--timeout 600"),
    (["--api-key-env", "MY-KEY"], "--api-key-env", "NAME of the variable"),
    (["--model", " "], "--model", "--model solar-open2"),
])
def test_usage_errors_name_the_flag_and_the_fix(tmp_path, capsys, no_network, extra, flag, fix):
    assert_refused_before_any_request(tmp_path, capsys, no_network, extra, flag, fix)


def test_file_arguments_are_checked_before_any_request(tmp_path, capsys, no_network):
    calls, transport = no_network
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert cli.main(BASE + ["--out", str(not_a_dir)], transport=transport) == 2
    assert "--out:" in capsys.readouterr().err
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--progress-file", str(tmp_path / "missing" / "p.jsonl")],
                    transport=transport) == 2
    assert "--progress-file:" in capsys.readouterr().err
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps({"source": "x", "decode_tok_s": [{"prompt_tokens": 2048}]}))
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--reference", str(bad)], transport=transport) == 2
    err = capsys.readouterr().err
    assert "--reference:" in err and "decode_tok_s[0]" in err
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--reference", str(tmp_path / "nope.json")], transport=transport) == 2
    assert "cannot read" in capsys.readouterr().err
    assert calls == []


def test_missing_required_flags_and_unknown_flags_exit_2(tmp_path, capsys):
    assert cli.main(["run", "--model", "m", "--out", str(tmp_path)]) == 2
    assert "--url" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert cli.main(BASE + ["--out", str(tmp_path), "positional-secret", "--bogus", "--other=hidden-value"]) == 2
    err = capsys.readouterr().err
    assert "--bogus" in err and "--other" in err and "positional-secret" not in err and "hidden-value" not in err


@pytest.mark.parametrize("argv", [["--api-key", "sk-live-123"], ["--api-key=sk-live-123"]])
def test_an_api_key_on_the_command_line_is_refused_and_not_echoed(tmp_path, capsys, argv):
    code = cli.main(BASE + ["--out", str(tmp_path)] + argv)
    printed = capsys.readouterr()
    assert code == 2 and "SPARKCTL_API_KEY" in printed.err
    assert "sk-live-123" not in printed.err + printed.out


def test_abbreviated_flags_are_not_accepted(tmp_path, capsys):
    # argparse would otherwise read --api-key-e VALUE as --api-key-env VALUE.
    assert cli.main(BASE + ["--out", str(tmp_path), "--api-key-e", "X"]) == 2


def test_selftest_prints_the_client_capacity():
    result = subprocess.run([sys.executable, "-m", "sparkctl.bench", "selftest", "--seconds", "0.2"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("client capacity: ")
    rate = float(result.stdout.split()[2].replace(",", ""))
    assert rate > 1000  # a parser slower than this could not keep up with one fast stream


def test_selftest_usage_error(capsys):
    assert cli.main(["selftest", "--seconds", "-1"]) == 2
    assert "--seconds" in capsys.readouterr().err


# --- the key through a private file (an `environment:` shows in Ansible's -vvv EXEC line) -----------


def _key_file(tmp_path, mode=0o600, text="sk-FILEkey-0123456789abcdef0123456789\n"):
    path = tmp_path / "key"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_key_file_is_sent_as_the_bearer_key(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SPARKCTL_API_KEY", raising=False)
    seen = []

    def handler(request):
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, json={"error": "no"})

    key = _key_file(tmp_path)
    cli.main(BASE + ["--out", str(tmp_path / "o"), "--api-key-file", str(key), "--prompt-tokens", "64",
                     "--concurrency", "1", "--warmup", "0", "--requests-per-stream", "1", "--selftest-seconds", "0.1"],
             transport=httpx.MockTransport(handler))
    printed = capsys.readouterr()
    assert seen and set(seen) == {"Bearer sk-FILEkey-0123456789abcdef0123456789"}
    assert "sk-FILEkey" not in printed.out + printed.err
    assert "sk-FILEkey" not in "".join(p.read_text() for p in (tmp_path / "o").glob("*.json"))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_file_others_can_read_is_refused(tmp_path, capsys, no_network, mode):
    calls, transport = no_network
    key = _key_file(tmp_path, mode)
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--api-key-file", str(key)], transport=transport) == 2
    err = capsys.readouterr().err
    assert "run: --api-key-file:" in err and "chmod 600" in err and "sk-FILEkey" not in err
    assert calls == []


def test_a_missing_or_empty_key_file_is_refused(tmp_path, capsys, no_network):
    calls, transport = no_network
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--api-key-file", str(tmp_path / "none")], transport=transport) == 2
    assert "run: --api-key-file:" in capsys.readouterr().err
    empty = _key_file(tmp_path, text="\n")
    assert cli.main(BASE + ["--out", str(tmp_path / "o"), "--api-key-file", str(empty)], transport=transport) == 2
    assert "is empty" in capsys.readouterr().err
    assert calls == []


def test_the_benchmark_role_hands_the_key_through_a_file_not_the_environment():
    import yaml

    tasks = []
    for path in (REPO / "roles" / "benchmark" / "tasks").glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            tasks += [task] + task.get("block", []) + task.get("always", []) + task.get("rescue", [])
    assert not [t.get("name") for t in tasks if "environment" in t], "an environment: shows in the -vvv EXEC line"
    start = next(t for t in tasks if t.get("name") == "Start the benchmark client on the control node")
    # The key file's path, never the key: the client reads it (filter bench_client_argv passes --api-key-file).
    assert start["vars"]["benchmark_client_settings"]["api_key_file"] == "{{ benchmark_key_tmp.path }}"
    assert "bench_client_argv" in start["ansible.builtin.command"]["argv"]
