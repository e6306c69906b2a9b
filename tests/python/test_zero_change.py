# SPDX-License-Identifier: Apache-2.0
"""Zero-change mode: autohook/sitecustomize.py first on PYTHONPATH reports an unmodified script."""
import os
import tempfile
import textwrap
import unittest

import support

PLAIN = support.fixture("plain_train.py")


class ZeroChangeMode(unittest.TestCase):
    def test_steps_of_an_unmodified_script_without_changing_its_results(self):
        with support.TempRunDir() as run:
            # Without saturate_client on the path: sitecustomize finds its own package.
            code, hooked_out, err = support.run_python(
                [PLAIN], run.env(SATURATE_BATCH_SIZE=64), hook=True, client_on_path=False)
            lines = support.read_metrics(run.metrics)
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")
        code, plain_out, err = support.run_python([PLAIN], support.clean_env())
        self.assertEqual(code, 0, err)
        self.assertEqual(hooked_out, plain_out)  # same losses, no protocol lines on stdout
        self.assertEqual([line["ev"] for line in lines], ["start"] + ["step"] * 32 + ["end"])
        start, steps = lines[0], lines[1:-1]
        self.assertEqual((start["mode"], start["applied"], start["ignored"]),
                         ("zero-change", {}, ["batch_size"]))
        self.assertEqual({s["samples"] for s in steps}, {16})  # eval batches of 50 not counted
        self.assertEqual([s["step"] for s in steps], list(range(1, 33)))
        self.assertTrue(all(s["data_wait_s"] >= 0 for s in steps))
        self.assertEqual(lines[-1]["status"], "ok")

    def test_max_steps_ends_the_script_after_that_many_steps(self):
        with support.TempRunDir() as run:
            code, out, err = support.run_python([PLAIN], run.env(SATURATE_MAX_STEPS=3), hook=True)
            lines = support.read_metrics(run.metrics)
        self.assertEqual(code, 0, err)
        self.assertNotIn("final loss", out)
        self.assertEqual([line["ev"] for line in lines], ["start"] + ["step"] * 3 + ["end"])
        self.assertEqual(lines[-1]["message"], "stopped after SATURATE_MAX_STEPS=3")

    def test_torch_without_a_dataloader_reports_zero_samples(self):
        script = textwrap.dedent("""
            import torch
            w = torch.zeros(3, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            for _ in range(2):
                (w - 1).pow(2).sum().backward()
                opt.step()
            print("done")
        """)
        with support.TempRunDir() as run:
            code, out, err = support.run_python(["-c", script], run.env(), hook=True)
            lines = support.read_metrics(run.metrics)
        self.assertEqual((code, out), (0, "done\n"), err)
        self.assertEqual([(line["ev"], line.get("samples")) for line in lines],
                         [("start", None), ("step", 0), ("step", 0), ("end", None)])

    def test_out_of_memory_after_a_batch_ends_with_oom(self):
        script = textwrap.dedent("""
            import torch
            loader = torch.utils.data.DataLoader(torch.zeros(8, 2), batch_size=4)
            for batch in loader:
                raise torch.OutOfMemoryError("simulated: Tried to allocate 80.00 GiB")
        """)
        with support.TempRunDir() as run:
            code, _, err = support.run_python(["-c", script], run.env(), hook=True)
            lines = support.read_metrics(run.metrics)
        self.assertEqual(code, 1, err)
        self.assertEqual([line["ev"] for line in lines], ["start", "end"])
        self.assertEqual(lines[-1]["status"], "oom")

    def test_a_script_without_torch_runs_unchanged_and_other_sitecustomize_still_loads(self):
        with support.TempRunDir() as run, tempfile.TemporaryDirectory() as site:
            marker = os.path.join(run.path, "chained")
            with open(os.path.join(site, "sitecustomize.py"), "w") as f:
                f.write("import os\nopen(os.environ['CHAIN_MARKER'], 'w').close()\n")
            env = run.env(CHAIN_MARKER=marker, PYTHONPATH=site)
            code, out, err = support.run_python(
                ["-c", "import sys; print('torch' in sys.modules)"], env, hook=True)
            self.assertTrue(os.path.exists(marker))
            self.assertFalse(os.path.exists(run.metrics))
        self.assertEqual((code, out, err), (0, "False\n", ""))


if __name__ == "__main__":
    unittest.main()
