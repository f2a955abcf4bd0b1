from ansible_collections.sparkctl.spark.plugins.filter.unit_states import unit_states


def test_installed_units_in_loop_order():
    results = [
        {"item": "a.service", "status": {"Id": "a.service", "LoadState": "loaded", "ActiveState": "active", "SubState": "running"}},
        {"item": "b.service", "status": {"Id": "b.service", "LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}},
        {"item": "c.socket", "status": {"Id": "c.socket", "LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"}},
        {"item": "d.service", "failed": True, "msg": "no status"},
    ]
    assert unit_states(results) == "a.service=active/running, c.socket=failed/failed"
    assert unit_states([]) == "none installed"
