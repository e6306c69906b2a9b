# SPDX-License-Identifier: Apache-2.0
"""fixtures/oom_train.py: out of memory is reported as end status "oom" and a nonzero exit."""
import unittest

import support

OOM = support.fixture("oom_train.py")


class OutOfMemory(unittest.TestCase):
    def run_oom(self, kind, batch_size):
        with support.TempRunDir() as run:
            env = run.env(SATURATE_BATCH_SIZE=batch_size)
            code, _, err = support.run_python([OOM, "--kind", kind], env)
            return code, err, support.read_metrics(run.metrics)

    def test_out_of_memory_error_type_ends_with_oom(self):
        code, err, lines = self.run_oom("type", 100)
        self.assertNotEqual(code, 0)
        self.assertIn("OutOfMemoryError", err)
        self.assertEqual([line["ev"] for line in lines], ["start", "end"])
        self.assertEqual(lines[-1]["status"], "oom")
        self.assertTrue(lines[-1]["message"].startswith("OutOfMemoryError: simulated"))

    def test_cpu_allocator_message_ends_with_oom(self):
        # A chained cause (--kind cause) is covered in-process by test_lines.
        code, _, lines = self.run_oom("message", 100)
        self.assertNotEqual(code, 0)
        self.assertEqual(lines[-1]["status"], "oom")
        self.assertIn("DefaultCPUAllocator: can't allocate memory", lines[-1]["message"])

    def test_a_batch_that_fits_ends_ok(self):
        code, err, lines = self.run_oom("type", 8)
        self.assertEqual(code, 0, err)
        self.assertEqual([line["ev"] for line in lines], ["start"] + ["step"] * 3 + ["end"])
        self.assertEqual(lines[-1]["status"], "ok")


if __name__ == "__main__":
    unittest.main()
