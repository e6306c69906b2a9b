# SPDX-License-Identifier: Apache-2.0
"""fixtures/coop_train.py, a cooperative script, run as saturate would run it."""
import os
import unittest

import support

COOP = support.fixture("coop_train.py")


class CooperativeScript(unittest.TestCase):
    def test_reports_start_steps_eval_and_end(self):
        with support.TempRunDir() as run:
            env = run.env(SATURATE_BATCH_SIZE=24, SATURATE_GRAD_ACCUM=2, SATURATE_PRECISION="bf16",
                          SATURATE_NUM_WORKERS=0, SATURATE_PIN_MEMORY=1, SATURATE_MAX_STEPS=4,
                          SATURATE_SEED=3)
            code, out, err = support.run_python([COOP], env)
            lines = support.read_metrics(run.metrics)
        self.assertEqual(code, 0, err)
        self.assertNotIn(support.PREFIX, out)
        self.assertEqual([line["ev"] for line in lines], ["start"] + ["step"] * 4 + ["eval", "end"])
        start, steps, end = lines[0], lines[1:5], lines[-1]
        self.assertEqual(start["applied"], {"batch_size": 24, "num_workers": 0, "grad_accum": 2,
                                            "precision": "bf16", "seed": 3})
        self.assertEqual((start["ignored"], start["mode"]), (["pin_memory"], "cooperative"))
        self.assertEqual([s["step"] for s in steps], [1, 2, 3, 4])
        self.assertEqual({s["samples"] for s in steps}, {48})
        self.assertTrue(all("data_wait_s" in s and "loss" in s for s in steps))
        times = [line["t"] for line in lines]
        self.assertEqual(times, sorted(times))
        self.assertEqual((lines[5]["name"], lines[5]["step"], lines[5]["higher_is_better"]),
                         ("val_accuracy", 4, True))
        self.assertEqual(end["status"], "ok")

    def test_lines_go_to_stdout_with_the_prefix_without_a_metrics_file(self):
        with support.TempRunDir() as run:
            env = run.env(SATURATE_MAX_STEPS=2)
            del env["SATURATE_METRICS"]
            code, out, err = support.run_python([COOP], env)
            self.assertEqual(os.listdir(run.path), [])
        self.assertEqual(code, 0, err)
        lines = support.stdout_lines(out)
        self.assertEqual([line["ev"] for line in lines], ["start", "step", "step", "eval", "end"])
        self.assertIsInstance(support.final_loss(out), float)

    def test_an_exception_ends_with_error_and_its_first_line(self):
        with support.TempRunDir() as run:
            code, _, err = support.run_python([COOP, "--raise-at", "3"], run.env())
            lines = support.read_metrics(run.metrics)
        self.assertNotEqual(code, 0)
        self.assertIn("synthetic failure at step 3", err)
        self.assertEqual([line["ev"] for line in lines], ["start", "step", "step", "end"])
        self.assertEqual(lines[-1]["status"], "error")
        self.assertEqual(lines[-1]["message"], "ValueError: synthetic failure at step 3")

    def test_malformed_setting_is_a_clear_error(self):
        with support.TempRunDir() as run:
            code, _, err = support.run_python([COOP], run.env(SATURATE_BATCH_SIZE="abc"))
            self.assertFalse(os.path.exists(run.metrics))
        self.assertEqual(code, 1)
        self.assertIn("SettingsError: saturate: SATURATE_BATCH_SIZE='abc' is not a whole number",
                      err)

    def test_outside_saturate_nothing_is_written(self):
        with support.TempRunDir() as run:
            env = support.clean_env(SATURATE_METRICS=run.metrics, SATURATE_MAX_STEPS=2)
            code, out, err = support.run_python([COOP, "--epochs", "1"], env)
            self.assertEqual(os.listdir(run.path), [])
        self.assertEqual(code, 0, err)
        self.assertNotIn(support.PREFIX, out)
        self.assertIsInstance(support.final_loss(out), float)


if __name__ == "__main__":
    unittest.main()
