"""A headless Chromium (Debian's `chromium` package, on the control node) screenshot of the lab
Prometheus's graph page for the tokens/s and MemAvailable queries, kept as a test artifact
(marker `screenshot`: by hand, on a lab the observe stage converged, e.g. after
tests/integration/test_lab_observe.py):

    SPARKLAB_INVENTORY=... pytest tests/integration/test_lab_observe_screenshot.py -m screenshot

Prometheus asks for basic auth over HTTPS (a certificate of sparkctl's CA, roles/observe
observe_tls); Chromium gets the page through a loopback proxy in this test that adds the
credentials and checks Prometheus's certificate against the CA (its certificate read from the
head), so neither the password nor a trust exception is on any command line. The PNG goes to
$SPARKCTL_ARTIFACTS_DIR (default .lab/artifacts) and its path is printed."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from labrun import management_address, node_exec

pytestmark = [pytest.mark.screenshot]

HEAD = "spark1"
REPO = Path(__file__).resolve().parents[2]
QUERIES = ("sum(rate(vllm:generation_tokens_total[1m]))", 'node_memory_MemAvailable_bytes{job="node"}')
# sparkctl's CA's certificate, on every node (roles/observe, observe_tls_ca_cert).
CA_CERT = "/etc/prometheus/tls/sparkctl-ca.crt"


def _proxy(upstream: str, authorization: str, context: ssl.SSLContext) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            request = urllib.request.Request(upstream + self.path, data=self.rfile.read(length) if length else None,
                                             method=self.command)
            for name in ("Content-Type", "Accept"):
                if self.headers.get(name):
                    request.add_header(name, self.headers[name])
            request.add_header("Authorization", authorization)
            try:
                with urllib.request.urlopen(request, timeout=30, context=context) as answer:
                    status, headers, body = answer.status, answer.headers, answer.read()
            except urllib.error.HTTPError as error:
                status, headers, body = error.code, error.headers, error.read()
            self.send_response(status)
            for name in ("Content-Type", "Cache-Control"):
                if headers.get(name):
                    self.send_header(name, headers[name])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _forward

        def log_message(self, fmt, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _query(base: str, expr: str) -> list:
    with urllib.request.urlopen(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as answer:
        return json.loads(answer.read())["data"]["result"]


def _coloured_pixels(png: Path) -> int:
    """Pixels of a clearly saturated colour: the graphs' lines (the page itself is greys and a little blue)."""
    from matplotlib import image
    pixels = image.imread(png)[..., :3]
    spread = pixels.max(axis=-1) - pixels.min(axis=-1)
    return int((spread > 0.35).sum())


def test_prometheus_graph_page_screenshot_shows_live_graphs(lab_up):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on the control node: apt-get install -y chromium")
    password = node_exec(HEAD, "cat", "/etc/prometheus/sparkctl.password").stdout.strip()
    token = "Basic " + base64.b64encode(f"sparkctl:{password}".encode()).decode()
    trusting = ssl.create_default_context(cadata=node_exec(HEAD, "cat", CA_CERT).stdout)
    server = _proxy(f"https://{management_address(HEAD)}:9090", token, trusting)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # Live data to draw: both queries answer now.
        for expr in QUERIES:
            assert _query(base, expr), f"{expr}: no data in the lab's Prometheus (converge with -e spark_observe=true)"
        params = {}
        for index, expr in enumerate(QUERIES):
            params.update({f"g{index}.expr": expr, f"g{index}.tab": "0", f"g{index}.range_input": "30m",
                           f"g{index}.stacked": "0"})
        url = f"{base}/graph?" + urllib.parse.urlencode(params)
        out = Path(os.environ.get("SPARKCTL_ARTIFACTS_DIR", REPO / ".lab" / "artifacts"))
        out.mkdir(parents=True, exist_ok=True)
        png = out / f"prometheus-graph-{time.strftime('%Y%m%dT%H%M%S')}.png"
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--window-size=1400,1500", "--virtual-time-budget=20000", f"--screenshot={png}", url],
                              capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0 and png.is_file(), done.stderr[-3000:]
    finally:
        server.shutdown()
    print(f"screenshot: {png}")
    assert _coloured_pixels(png) > 500, f"{png}: no graph lines drawn"
