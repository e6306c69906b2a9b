# SPDX-License-Identifier: Apache-2.0
"""Reading saturate's SATURATE_* settings: types, absent values and clear errors."""
import unittest

import support  # noqa: F401  (puts saturate_client on sys.path)
from saturate_client.settings import SettingsError, read_protocol, read_settings


class ReadSettings(unittest.TestCase):
    def test_every_setting_is_typed(self):
        env = {"SATURATE_BATCH_SIZE": "96", "SATURATE_GRAD_ACCUM": "2", "SATURATE_PRECISION": "bf16",
               "SATURATE_NUM_WORKERS": "0", "SATURATE_PREFETCH": "4", "SATURATE_PIN_MEMORY": "1",
               "SATURATE_MAX_STEPS": "0", "SATURATE_SEED": "7"}
        self.assertEqual(read_settings(env), {
            "batch_size": 96, "grad_accum": 2, "precision": "bf16", "num_workers": 0,
            "prefetch": 4, "pin_memory": True, "max_steps": 0, "seed": 7})

    def test_absent_or_empty_settings_are_left_out(self):
        self.assertEqual(read_settings({"SATURATE_BATCH_SIZE": "", "OTHER": "1"}), {})

    def test_malformed_value_names_the_variable_and_the_value(self):
        cases = {"SATURATE_BATCH_SIZE": "abc", "SATURATE_GRAD_ACCUM": "0",
                 "SATURATE_NUM_WORKERS": "-1", "SATURATE_PRECISION": "fp8",
                 "SATURATE_PIN_MEMORY": "yes", "SATURATE_MAX_STEPS": "1.5"}
        for variable, value in cases.items():
            with self.subTest(variable=variable):
                with self.assertRaises(SettingsError) as caught:
                    read_settings({variable: value})
                self.assertIn(variable, str(caught.exception))
                self.assertIn(repr(value), str(caught.exception))


class ReadProtocol(unittest.TestCase):
    def test_absent_protocol_means_not_under_saturate(self):
        self.assertIsNone(read_protocol({}))
        self.assertEqual(read_protocol({"SATURATE_PROTOCOL": "1"}), 1)

    def test_unknown_version_is_an_error(self):
        with self.assertRaisesRegex(SettingsError, "SATURATE_PROTOCOL='2' is not supported"):
            read_protocol({"SATURATE_PROTOCOL": "2"})


if __name__ == "__main__":
    unittest.main()
