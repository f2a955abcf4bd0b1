"""sparkctl.bench.arrivals: constant spacing, the gamma-distributed gaps' mean and variance for a
fixed seed, reproducibility, the ramp reaching its end rate, and --load specs refused with the
flag named."""

import math
from itertools import pairwise
from statistics import fmean, pvariance

import pytest

from sparkctl.bench import arrivals
from sparkctl.bench.arrivals import LoadSpec, SpecError, parse_load


def gaps(offsets):
    return [b - a for a, b in pairwise(offsets)]


def test_constant_is_evenly_spaced_from_zero():
    offsets = arrivals.constant(4, 9)
    assert offsets == [i * 0.25 for i in range(9)]
    assert all(gap == pytest.approx(0.25, abs=1e-12) for gap in gaps(offsets))
    assert arrivals.constant(math.inf, 3) == [0.0, 0.0, 0.0]
    assert arrivals.constant(2, 0) == [] and arrivals.constant(2, 1) == [0.0]


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 2.0])
def test_poisson_gaps_have_the_gamma_mean_and_variance(burstiness):
    rate, draws = 4.0, 20_000
    offsets = arrivals.poisson(rate, draws + 1, burstiness=burstiness, seed=7)
    assert offsets[0] == 0.0 and len(offsets) == draws + 1
    observed = gaps(offsets)
    assert min(observed) >= 0
    assert fmean(observed) == pytest.approx(1 / rate, rel=0.02)
    assert pvariance(observed) == pytest.approx(1 / (burstiness * rate ** 2), rel=0.05)


def test_burstiness_orders_the_spread():
    spread = {b: pvariance(gaps(arrivals.poisson(2.0, 5001, burstiness=b, seed=1))) for b in (0.25, 1.0, 4.0)}
    assert spread[0.25] > spread[1.0] > spread[4.0]
    assert gaps(arrivals.poisson(2.0, 5, burstiness=math.inf)) == [0.5] * 4


def test_the_same_seed_gives_the_same_schedule():
    assert arrivals.poisson(3, 100, 0.5, seed=42) == arrivals.poisson(3, 100, 0.5, seed=42)
    assert arrivals.poisson(3, 100, 0.5, seed=42) != arrivals.poisson(3, 100, 0.5, seed=43)
    assert arrivals.poisson(math.inf, 4) == [0.0] * 4
    assert parse_load("poisson:rate=3,seed=5").offsets(50) == arrivals.poisson(3, 50, seed=5)


@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_ramp_rises_monotonically_to_the_end_rate(shape):
    rates = arrivals.ramp_rates(1, 8, 50, shape)
    assert rates[0] == 1 and rates[-1] == 8
    assert all(a < b for a, b in pairwise(rates))
    offsets = arrivals.ramp(1, 8, 50, shape)
    spacing = gaps(offsets)
    assert offsets[0] == 0.0 and all(a < b for a, b in pairwise(offsets))
    assert all(a > b for a, b in pairwise(spacing))  # the rate rises: each gap is shorter
    assert spacing[-1] == pytest.approx(1 / 8, abs=1e-12)
    assert spacing[0] == pytest.approx(1 / rates[1])


def test_ramp_shapes_and_random_gaps():
    linear, exponential = arrivals.ramp_rates(1, 9, 3, "linear"), arrivals.ramp_rates(1, 9, 3, "exponential")
    assert linear == [1, 5, 9] and exponential == pytest.approx([1, 3, 9])
    drawn = arrivals.ramp(1, 8, 200, burstiness=1.0, seed=3)
    assert drawn == arrivals.ramp(1, 8, 200, burstiness=1.0, seed=3) and drawn != arrivals.ramp(1, 8, 200)
    assert arrivals.ramp(2, 2, 4) == arrivals.constant(2, 4)
    assert arrivals.ramp(1, 8, 0) == [] and arrivals.ramp(1, 8, 1) == [0.0]


@pytest.mark.parametrize("call", [
    lambda: arrivals.constant(0, 3),
    lambda: arrivals.constant(-1, 3),
    lambda: arrivals.constant(1, -1),
    lambda: arrivals.poisson(1, 3, burstiness=0),
    lambda: arrivals.ramp(8, 1, 3),
    lambda: arrivals.ramp(0, 1, 3),
    lambda: arrivals.ramp(1, math.inf, 3),
    lambda: arrivals.ramp(1, 2, 3, shape="cubic"),
])
def test_bad_arguments_raise(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("text, expected", [
    ("constant:rate=2", LoadSpec("constant", rate=2.0)),
    ("poisson:rate=4,burstiness=0.5", LoadSpec("poisson", rate=4.0, burstiness=0.5, seed=0)),
    ("poisson:rate=inf", LoadSpec("poisson", rate=math.inf, burstiness=1.0, seed=0)),
    (" Poisson : rate = 4 , seed = 9 ", LoadSpec("poisson", rate=4.0, burstiness=1.0, seed=9)),
    ("ramp:start=1,end=8", LoadSpec("ramp", start=1.0, end=8.0, shape="linear", seed=0)),
    ("ramp:start=1,end=8,shape=exponential,burstiness=1", LoadSpec("ramp", start=1.0, end=8.0, shape="exponential",
                                                                   burstiness=1.0, seed=0)),
    ("concurrency:4", LoadSpec("concurrency", streams=4)),
    ("concurrency:streams=2", LoadSpec("concurrency", streams=2)),
])
def test_load_specs_parse(text, expected):
    spec = parse_load(text)
    assert spec == expected
    assert parse_load(str(spec)) == spec  # the canonical form reads back


def test_a_spec_gives_its_schedule():
    assert parse_load("constant:rate=2").offsets(3) == [0.0, 0.5, 1.0]
    assert parse_load("ramp:start=1,end=4").offsets(4) == arrivals.ramp(1, 4, 4)
    assert parse_load("concurrency:4").offsets(10) is None
    assert str(parse_load("poisson:rate=4")) == "poisson:rate=4,burstiness=1,seed=0"


@pytest.mark.parametrize("text, words", [
    ("", "no load given"),
    ("uniform:rate=2", "'uniform' is not a load kind"),
    ("rate=2", "is not a load kind"),
    ("constant", "constant needs rate"),
    ("constant:rate=0", "rate=0 is not a positive number"),
    ("constant:rate=fast", "rate=fast is not a positive number"),
    ("constant:rate=nan", "rate=nan"),
    ("constant:rate=2,burstiness=1", "constant takes no 'burstiness'"),
    ("poisson:rate=4,burstiness=-1", "burstiness=-1"),
    ("poisson:rate=4,seed=1.5", "seed=1.5 is not an integer"),
    ("poisson:rate=4,rate=5", "rate is given twice"),
    ("poisson:rate", "'rate' is not key=value"),
    ("ramp:start=1", "ramp needs end"),
    ("ramp:start=8,end=1", "a ramp rises"),
    ("ramp:start=1,end=inf", "end=inf is not a positive number"),
    ("ramp:start=1,end=8,shape=step", "shape=step is not linear or exponential"),
    ("concurrency:0", "positive number of streams"),
    ("concurrency:", "positive number of streams"),
    ("concurrency:two", "positive number of streams"),
])
def test_bad_load_specs_name_the_flag_the_problem_and_a_fix(text, words):
    with pytest.raises(SpecError) as caught:
        parse_load(text)
    message = str(caught.value)
    assert message.startswith("--load: ") and words in message
    assert "give" in message.split(";", 1)[1] and "--load " in message.split(";", 1)[1]
    assert caught.value.flag == "--load"
