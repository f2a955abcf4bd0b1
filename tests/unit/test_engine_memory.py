"""engine_memory_fit: the pre-launch memory check."""

from ansible_collections.sparkctl.spark.plugins.filter.engine_memory import engine_memory_fit

GIB = 1024**3
PROFILE = {"name": "p", "memory": {"weights_per_rank_bytes": 70 * GIB, "kv_pool_bytes": 26 * GIB, "overhead_bytes": 4 * GIB},
           "checkpoint": {"size_bytes": 1}, "topology": {"tensor_parallel": 2}}


def test_fits_with_the_guard_line_counted():
    fit = engine_memory_fit({"mem_available_bytes": 110 * GIB}, PROFILE, 8 * GIB)
    assert fit["fits"] is True and fit["need_bytes"] == 108 * GIB


def test_refused_with_the_numbers_and_the_fix():
    fit = engine_memory_fit({"mem_available_bytes": 100 * GIB}, PROFILE, 8 * GIB)
    assert fit["fits"] is False
    assert fit["message"].startswith("100.0 GiB available < 108.0 GiB needed by profile p")
    assert "weights 70.0 GiB + KV pool 26.0 GiB + overhead 4.0 GiB + OOM guard line 8.0 GiB" in fit["message"]
    assert "spark_profile_overrides" in fit["message"]


def test_unknown_memory_is_refused():
    assert engine_memory_fit({}, PROFILE, 0)["fits"] is False


def test_weights_default_to_the_checkpoint_split_over_the_ranks():
    profile = {"name": "q", "memory": {"kv_pool_bytes": 0, "overhead_bytes": 0}, "checkpoint": {"size_bytes": 10 * GIB},
               "topology": {"tensor_parallel": 2}}
    assert engine_memory_fit({"mem_available_bytes": 5 * GIB}, profile, 0)["fits"] is True
    assert engine_memory_fit({"mem_available_bytes": 5 * GIB - 1}, profile, 0)["fits"] is False
