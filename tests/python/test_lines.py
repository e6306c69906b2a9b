# SPDX-License-Identifier: Apache-2.0
"""Encoding protocol lines and classifying the exception that ends a program."""
import json
import unittest

import support  # noqa: F401
from saturate_client.failure import classify, describe, is_out_of_memory
from saturate_client.lines import MAX_LINE_BYTES, STDOUT_PREFIX, encode_line


class EncodeLine(unittest.TestCase):
    def test_one_compact_line_with_a_newline(self):
        data = encode_line({"v": 1, "ev": "step", "t": 1.5, "step": 1, "samples": 8})
        self.assertEqual(data, b'{"v":1,"ev":"step","t":1.5,"step":1,"samples":8}\n')

    def test_non_finite_numbers_become_null(self):
        line = json.loads(encode_line({"ev": "step", "loss": float("nan"),
                                       "applied": {"lr": float("inf")}}))
        self.assertIsNone(line["loss"])
        self.assertIsNone(line["applied"]["lr"])

    def test_long_message_is_shortened_to_the_limit(self):
        data = encode_line({"v": 1, "ev": "end", "message": "\u00e9x" * 5000}, STDOUT_PREFIX)
        self.assertLessEqual(len(data), MAX_LINE_BYTES)
        self.assertTrue(json.loads(data[len(STDOUT_PREFIX):])["message"].endswith("..."))

    def test_other_oversized_line_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "over the protocol's 4096"):
            encode_line({"ev": "start", "applied": {"x": "y" * 5000}})


class Classify(unittest.TestCase):
    def test_known_out_of_memory_messages(self):
        for message in ("CUDA out of memory. Tried to allocate 2.00 GiB",
                        "CUDA error: out of memory",
                        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes",
                        "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
                        "DataLoader worker (pid 12) is killed by signal: Killed. "):
            with self.subTest(message=message):
                self.assertEqual(classify(RuntimeError(message))[0], "oom")

    def test_memory_error_and_a_chained_cause_are_out_of_memory(self):
        self.assertTrue(is_out_of_memory(MemoryError()))
        try:
            try:
                raise RuntimeError("CUDA out of memory")
            except RuntimeError as inner:
                raise ValueError("step failed") from inner
        except ValueError as outer:
            self.assertTrue(is_out_of_memory(outer))

    def test_ambiguous_and_other_errors_are_errors_with_their_first_line(self):
        self.assertEqual(classify(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")),
                         ("error", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"))
        self.assertEqual(describe(ValueError("first\nsecond")), "ValueError: first")
        self.assertEqual(describe(KeyboardInterrupt()), "KeyboardInterrupt")


if __name__ == "__main__":
    unittest.main()
