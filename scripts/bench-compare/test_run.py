"""Tests of run.sh's order of sides, through its --plan (which builds and runs nothing)."""

import os
import subprocess
import unittest

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.sh")


def plan(*args):
    out = subprocess.run(["bash", RUN, "--plan", *args], capture_output=True, text=True)
    return out.returncode, [line.split() for line in out.stdout.splitlines()], out.stderr


class Order(unittest.TestCase):
    def test_each_round_starts_one_side_further(self):
        code, rounds, _ = plan("--runs", "4", "--variant", "mif:CHIME_EXECUTOR__MAX_IN_FLIGHT=4096")
        self.assertEqual(code, 0)
        self.assertEqual(rounds, [["1", "base", "new", "mif"], ["2", "new", "mif", "base"],
                                  ["3", "mif", "base", "new"], ["4", "base", "new", "mif"]])

    def test_every_side_runs_once_in_each_position(self):
        _, rounds, _ = plan("--base", "none", "--runs", "3",
                            "--variant", "a:CHIME_X=1", "--variant", "b:CHIME_Y=2")
        for position in range(3):
            self.assertEqual(sorted(r[1 + position] for r in rounds), ["a", "b", "new"])

    def test_a_variant_may_not_take_a_sides_name(self):
        code, _, err = plan("--variant", "new:CHIME_X=1")
        self.assertEqual(code, 2)
        self.assertIn("a second side named new", err)


if __name__ == "__main__":
    unittest.main()
