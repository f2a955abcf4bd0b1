"""sparkctl.bench.goodput: --slo parsing (units, errors naming the flag and the item), which
requests meet an SLO, goodput, and the capacity search against fake servers whose latency
curve is known: it finds the knee exactly, says when no load meets the SLO, and says the
capacity may be higher when every load does."""

import math

import pytest

from sparkctl.bench import goodput
from sparkctl.bench.arrivals import SpecError
from sparkctl.bench.goodput import find_capacity, meets, parse_slo


@pytest.mark.parametrize("text, expected", [
    ("ttft=2s,tpot=100ms,e2e=30s", {"ttft": 2.0, "tpot": 0.1, "e2e": 30.0}),
    ("itl=250ms", {"itl": 0.25}),
    (" TTFT = 1.5s , e2el=2000ms ", {"ttft": 1.5, "e2e": 2.0}),
    ("ttft=5e2ms", {"ttft": 0.5}),
])
def test_slo_specs_parse_to_seconds(text, expected):
    slo = parse_slo(text)
    assert slo == pytest.approx(expected)
    assert parse_slo(goodput.format_slo(slo)) == pytest.approx(slo)


@pytest.mark.parametrize("text, words", [
    ("", "no objective given"),
    ("ttft=2", "'2' is not a number with a unit"),
    ("ttft=fast", "'fast' is not a number with a unit"),
    ("ttft=2h", "'2h' is not a number with a unit"),
    ("ttft=-1s", "is not a number with a unit"),
    ("ttft=0ms", "an objective of 0"),
    ("latency=2s", "'latency' is not one of ttft, tpot, itl, e2e"),
    ("ttft", "'ttft' is not METRIC=VALUE"),
    ("ttft:2000", "KEY:VALUE"),
    ("ttft=1s,ttft=2s", "ttft is given twice"),
    ("e2e=1s,e2el=2s", "e2e is given twice"),
])
def test_bad_slo_specs_name_the_flag_the_item_and_an_example(text, words):
    with pytest.raises(SpecError) as caught:
        parse_slo(text)
    message = str(caught.value)
    assert message.startswith("--slo: ") and words in message
    assert "ttft=2s" in message.split(";", 1)[1]  # an example to copy


def record(ttft=0.5, tokens=11, decode_window=1.0, ok=True, t_send=0.0, itl=None, **extra):
    """A runner-shaped record: sent at t_send, first token after ttft, the rest over decode_window."""
    rec = {"ok": ok, "t_send": t_send, "t_first": t_send + ttft, "t_last": t_send + ttft + decode_window,
           "t_end": t_send + ttft + decode_window, "ttft_s": ttft, "completion_tokens": tokens}
    if itl is not None:
        rec["itl_s"] = itl
    return rec | extra


def test_request_metrics_are_derived_from_runner_records():
    values = goodput.request_metrics(record(ttft=0.5, tokens=11, decode_window=1.0))
    assert values["ttft"] == 0.5 and values["e2e"] == 1.5 and values["tpot"] == pytest.approx(0.1)
    assert values["itl"] is None
    assert goodput.request_metrics(record(tokens=1))["tpot"] == 0.0  # vLLM's convention for one token
    assert goodput.request_metrics({"ok": True, "ttft_s": 1, "tpot_s": 0.2, "e2e_s": 9, "itl_s": [0.1, 0.7, 0.2]}) == {
        "ttft": 1, "tpot": 0.2, "itl": 0.7, "e2e": 9}
    assert goodput.request_metrics({"ok": True, "itl_s": []})["itl"] == 0.0


def test_meets_checks_every_objective_and_failed_requests_never_meet():
    slo = {"ttft": 1.0, "tpot": 0.2, "e2e": 5.0}
    assert meets(record(ttft=1.0, tokens=11, decode_window=2.0), slo)  # on the objective is within it
    assert not meets(record(ttft=1.01), slo)
    assert not meets(record(tokens=11, decode_window=2.5), slo)  # tpot 0.25
    assert not meets(record(ttft=0.5, tokens=1000, decode_window=10 * 0.005 * 999), slo)  # e2e 50.45 s
    assert not meets(record(ok=False), slo)
    assert goodput.missed_objectives(record(ttft=2.0, decode_window=3.0), slo) == ["ttft", "tpot"]
    # itl: the longest gap; a record without gaps cannot show it met the objective.
    assert meets(record(itl=[0.05, 0.1, 0.09]), {"itl": 0.1})
    assert not meets(record(itl=[0.05, 0.3]), {"itl": 0.1})
    assert not meets(record(), {"itl": 0.1})


def test_goodput_counts_rates_and_fractions():
    slo = {"ttft": 1.0}
    records = [record(ttft=0.5, t_send=i) for i in range(6)] + [record(ttft=2.0, t_send=6), record(ok=False, t_send=7),
                                                                 record(t_send=8) | {"ttft_s": None, "t_first": None}]
    result = goodput.goodput(records, slo, duration_s=10.0)
    assert result["requests"] == 9 and result["ok_requests"] == 8 and result["good_requests"] == 6
    assert result["fraction"] == pytest.approx(6 / 9)
    assert result["goodput_rps"] == pytest.approx(0.6) and result["throughput_rps"] == pytest.approx(0.8)
    assert result["missed"] == {"ttft": 1} and result["unmeasured"] == {"ttft": 1}
    # Without a duration, the records' span: first send at 0, last end at 8 + 0.5 + 1.0.
    assert goodput.goodput(records, slo)["duration_s"] == pytest.approx(9.5)
    assert goodput.goodput([], slo)["fraction"] is None and goodput.goodput([], slo)["goodput_rps"] is None


class FakeServer:
    """TTFT = base * exp(load / knee) * spread_j for request j: a deterministic latency curve.
    The spread runs evenly from 0.9 to 1.1 over the requests, so the fraction meeting a TTFT
    objective falls gradually around the knee, exactly as the formula says."""

    def __init__(self, base=0.05, knee=4.0, requests=20):
        self.base, self.knee, self.requests = base, knee, requests
        self.loads = []

    def ttft(self, load, j):
        return self.base * math.exp(load / self.knee) * (0.9 + 0.2 * j / (self.requests - 1))

    def __call__(self, load):
        self.loads.append(load)
        return [record(ttft=self.ttft(load, j), t_send=j / load) for j in range(self.requests)]


def test_find_capacity_finds_the_known_knee_exactly():
    server = FakeServer()
    slo = {"ttft": 0.5}
    loads = range(1, 21)
    expected = max(load for load in loads
                   if sum(server.ttft(load, j) <= 0.5 for j in range(server.requests)) / server.requests >= 0.9)
    # At 8 the slowest request takes 0.05 * e^2 * 1.1 = 0.406 s; at 9 they spread over 0.427..0.522 s
    # and 15 of 20 are within 0.5 s.
    assert expected == 8
    result = find_capacity(server, loads, slo, fraction=0.9)
    assert result.capacity == expected and not result.may_be_higher
    assert server.loads == list(range(1, 10))  # load 9 met for 75 %: a clear miss, the walk stops there
    assert [p["load"] for p in result.points] == server.loads
    assert [p["meets"] for p in result.points] == [True] * 8 + [False]
    assert result.points[-1]["fraction"] == pytest.approx(0.75)
    assert result.points[-1]["missed"] == {"ttft": 5}
    assert result.points[0]["ttft_s"]["median"] == pytest.approx(0.05 * math.exp(1 / 4), rel=1e-9)
    assert result.points[0]["goodput_rps"] > 0
    assert "capacity 8" in result.note and "more than 10 percentage points below" in result.stop


def test_a_near_miss_does_not_stop_the_walk_but_two_misses_in_a_row_do():
    # A step server: load 3 a near miss (85 % within the SLO), 4 meets, 5 and 6 near misses.
    shares = {1: 1.0, 2: 1.0, 3: 0.85, 4: 0.95, 5: 0.85, 6: 0.85, 7: 0.0, 8: 0.0}
    seen = []

    def measure(load):
        seen.append(load)
        good = round(shares[load] * 20)
        return [record(ttft=0.1 if j < good else 5.0, t_send=j) for j in range(20)]

    result = find_capacity(measure, shares, {"ttft": 1.0}, fraction=0.9, margin=0.1)
    assert seen == [1, 2, 3, 4, 5, 6]
    assert result.capacity == 4
    assert "second load in a row" in result.stop
    assert "3 below it missed" in result.note  # non-monotone near the knee: said, to be repeated


def test_no_load_meeting_the_slo_gives_no_capacity():
    server = FakeServer(base=1.0)
    result = find_capacity(server, [1, 2, 4, 8], {"ttft": 0.5})
    assert result.capacity is None
    assert server.loads == [1]  # 0 % at the lowest load is a clear miss
    assert "no load met the SLO" in result.note and "try lower loads" in result.note


def test_every_load_meeting_the_slo_reports_the_highest_and_says_it_may_be_higher():
    server = FakeServer(base=0.001)
    result = find_capacity(server, [8, 2, 4, 4, 1], {"ttft": 0.5, "e2e": 10.0})
    assert server.loads == [1, 2, 4, 8]  # ascending, each load once
    assert result.capacity == 8 and result.may_be_higher
    assert "may be higher" in result.note and result.stop == "every load was measured"
    assert result.as_dict()["slo_text"] == "ttft=500ms,e2e=10s"


@pytest.mark.parametrize("kwargs", [{"loads": []}, {"slo": {}}, {"fraction": 0}, {"fraction": 1.5}, {"margin": -0.1}])
def test_find_capacity_refuses_bad_arguments(kwargs):
    arguments = {"measure": FakeServer(), "loads": [1, 2], "slo": {"ttft": 1.0}} | kwargs
    with pytest.raises(ValueError):
        find_capacity(**arguments)


def test_the_required_fraction_moves_the_knee_as_the_curve_says():
    # At load 9, 15 of 20 requests are within 0.5 s: it is the capacity when 75 % is enough.
    server = FakeServer()
    assert find_capacity(server, range(1, 21), {"ttft": 0.5}, fraction=0.75).capacity == 9
    assert server.loads == list(range(1, 11))


def test_records_as_the_runner_writes_them():
    # The runner stores tpot_s (None below two tokens), e2e_s and itl_s (one gap per token chunk; [] when failed).
    fine = {"ok": True, "ttft_s": 0.4, "tpot_s": 0.05, "e2e_s": 6.75, "itl_s": [0.04, 0.06, 0.3], "completion_tokens": 128}
    one_token = {"ok": True, "ttft_s": 0.4, "tpot_s": None, "e2e_s": 0.41, "itl_s": [], "completion_tokens": 1}
    failed = {"ok": False, "ttft_s": None, "tpot_s": None, "e2e_s": None, "itl_s": [], "completion_tokens": None}
    slo = parse_slo("ttft=500ms,tpot=60ms,itl=300ms,e2e=10s")
    assert meets(fine, slo) and meets(one_token, slo) and not meets(failed, slo)
    assert not meets(fine, parse_slo("itl=250ms"))
    assert goodput.goodput([fine, one_token, failed], slo, duration_s=2.0)["goodput_rps"] == 1.0
