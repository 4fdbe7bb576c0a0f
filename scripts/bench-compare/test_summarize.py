"""Tests of summarize.py on reports shaped as `chime-bench pipeline` writes them."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import summarize  # noqa: E402


def report(drain, p99, bullmq_ratio, share, steady_cpu=None):
    scenarios = [{"scenario": "burst", "setup": "postgres+redis",
                  "figures": {"drain_per_second": drain, "lateness_ms": {"p99": p99},
                              "targets_met": False, "windows": [{"p99_ms": 3}]},
                  "missed": [], "failed": []}]
    if steady_cpu is not None:
        scenarios.append({"scenario": "steady", "setup": "postgres",
                          "figures": {"cpu_total_per_1000": steady_cpu}})
    return {
        "scenarios": scenarios,
        "peers": [{"peer": "bullmq", "scenario": "burst", "figures": {"drain_per_second": 2000}}],
        "comparison": [{"scenario": "burst", "measure": "drain", "chime": drain,
                        "bullmq": {"value": 2000, "chime_advantage": bullmq_ratio}}],
        "burst_share_of_callback_floor": share,
        "burst_share_of_durable_floor": None,
        "durable_floor_share_of_callback_floor": 0.9,
        "beside_paced_floor": {"steady": {"rate_per_second": 5000, "cpu_over_floor": 2.5,
                                          "worst_window_p99_ms": 40,
                                          "floor_worst_window_p99_ms": None}},
    }


class Figures(unittest.TestCase):
    def test_flattens_scenarios_peers_ratios_and_the_floor_share(self):
        f = summarize.figures(report(10000, 1400, 5.0, 0.4, steady_cpu=0.13))
        self.assertEqual(f["burst.drain_per_second"], 10000)
        self.assertEqual(f["burst.lateness_ms.p99"], 1400)
        self.assertEqual(f["burst.windows[0].p99_ms"], 3)
        self.assertEqual(f["peer.bullmq.burst.drain_per_second"], 2000)
        self.assertEqual(f["vs.burst.drain.bullmq"], 5.0)
        self.assertEqual(f["burst_share_of_callback_floor"], 0.4)
        self.assertEqual(f["durable_floor_share_of_callback_floor"], 0.9)
        # A share the run could not compute is left out.
        self.assertNotIn("burst_share_of_durable_floor", f)
        self.assertEqual(f["beside_paced_floor.steady.cpu_over_floor"], 2.5)
        self.assertEqual(f["beside_paced_floor.steady.worst_window_p99_ms"], 40)
        # A floor figure the run did not have is left out, not taken for a zero.
        self.assertNotIn("beside_paced_floor.steady.floor_worst_window_p99_ms", f)
        # Another setup than the default is named, so setups side by side stay apart.
        self.assertEqual(f["steady@postgres.cpu_total_per_1000"], 0.13)
        # Flags are not figures.
        self.assertNotIn("burst.targets_met", f)


class Medians(unittest.TestCase):
    def test_each_side_gets_the_median_of_its_own_runs(self):
        with tempfile.TemporaryDirectory() as d:
            runs = []
            for side, drains in (("base", [9000, 8000, 12000]), ("new", [11000, 15000, 13000])):
                for i, drain in enumerate(drains):
                    path = os.path.join(d, f"{side}-{i}.json")
                    with open(path, "w") as f:
                        json.dump(report(drain, 1500, drain / 2000, 0.3), f)
                    runs.append(f"{side}={path}")
            out = os.path.join(d, "compare.json")
            printed = subprocess.run([sys.executable, os.path.join(HERE, "summarize.py"), out, *runs],
                                     check=True, capture_output=True, text=True).stdout
            with open(out) as f:
                table = json.load(f)
        self.assertEqual(table["sides"], ["base", "new"])
        drain = table["figures"]["burst.drain_per_second"]
        self.assertEqual(drain["base"]["median"], 9000)
        self.assertEqual(drain["new"]["median"], 13000)
        self.assertEqual(drain["new"]["runs"], [11000, 15000, 13000])
        self.assertEqual(table["figures"]["vs.burst.drain.bullmq"]["new"]["median"], 6.5)
        self.assertIn("burst.drain_per_second", printed)


if __name__ == "__main__":
    unittest.main()
