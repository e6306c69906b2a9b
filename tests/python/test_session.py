# SPDX-License-Identifier: Apache-2.0
"""Session in this process (no torch): the lines it writes, their order, and an inactive session."""
import contextlib
import io
import sys
import types
import unittest

import support
from saturate_client import Session, SettingsError, count_samples


def fake_session(run, **settings):
    env = run.env(**{f"SATURATE_{k.upper()}": v for k, v in settings.items()})
    return Session(environ=env, exit_hooks=False)


class SessionLines(unittest.TestCase):
    def test_start_lists_passed_settings_the_program_did_not_apply(self):
        with support.TempRunDir() as run:
            s = fake_session(run, batch_size=64, precision="bf16", max_steps=3)
            self.assertEqual(s.settings, {"batch_size": 64, "precision": "bf16", "max_steps": 3})
            s.start(applied={"batch_size": 64})
            start = support.read_metrics(run.metrics)[0]
        self.assertEqual((start["v"], start["ev"], start["trial"]), (1, "start", "t1"))
        self.assertEqual(start["applied"], {"batch_size": 64})
        self.assertEqual(start["ignored"], ["precision"])

    def test_steps_are_numbered_and_stop_at_max_steps(self):
        with support.TempRunDir() as run:
            s = fake_session(run, max_steps=2)
            s.step(samples=8, loss=0.5, tokens=80)
            self.assertFalse(s.should_stop())
            s.step(samples=8, loss=float("nan"))
            self.assertTrue(s.should_stop())
            s.eval("accuracy", 0.9, higher_is_better=True)
            s.end()
            s.step(samples=8)  # after end: nothing
            lines = support.read_metrics(run.metrics)
        self.assertEqual([line["ev"] for line in lines], ["start", "step", "step", "eval", "end"])
        self.assertEqual([lines[1]["step"], lines[2]["step"]], [1, 2])
        self.assertEqual((lines[1]["tokens"], lines[1]["loss"], lines[2]["loss"]), (80, 0.5, None))
        self.assertEqual((lines[3]["step"], lines[3]["higher_is_better"]), (2, True))
        self.assertEqual((lines[4]["status"], lines[4]["message"]), ("ok", ""))
        self.assertNotIn("data_wait_s", lines[1])

    def test_wrapped_loader_adds_data_wait_to_the_next_step(self):
        with support.TempRunDir() as run:
            s = fake_session(run)
            for batch in s.wrap_loader([[1, 2], [3, 4]]):
                s.step(samples=len(batch))
            lines = support.read_metrics(run.metrics)
        waits = [line["data_wait_s"] for line in lines if line["ev"] == "step"]
        self.assertEqual(len(waits), 2)
        self.assertTrue(all(w >= 0 for w in waits))

    def test_context_manager_ends_with_the_exception(self):
        with support.TempRunDir() as run:
            with self.assertRaises(RuntimeError):
                with fake_session(run) as s:
                    s.start(applied={})
                    raise RuntimeError("CUDA out of memory. Tried to allocate 1 GiB\nmore")
            end = support.read_metrics(run.metrics)[-1]
        self.assertEqual(end["status"], "oom")
        self.assertEqual(end["message"], "RuntimeError: CUDA out of memory. Tried to allocate 1 GiB")

    def test_all_ranks_lines_carry_the_rank(self):
        with support.TempRunDir() as run:
            env = run.env(SATURATE_ALL_RANKS=1, RANK=3, WORLD_SIZE=4)
            Session(environ=env, exit_hooks=False).end()
            lines = support.read_metrics(run.metrics)
        self.assertEqual([(line["ev"], line["rank"]) for line in lines], [("start", 3), ("end", 3)])
        self.assertEqual(lines[0]["world_size"], 4)

    def test_other_ranks_write_nothing_but_count_steps(self):
        with support.TempRunDir() as run:
            s = Session(environ=run.env(RANK=1, SATURATE_MAX_STEPS=1), exit_hooks=False)
            s.step(samples=4)
            self.assertTrue(s.should_stop())
            self.assertEqual(support.read_metrics(run.metrics), [])

    def test_stdout_prefix_when_no_metrics_file(self):
        with support.TempRunDir() as run:
            env = dict(run.env(), SATURATE_METRICS="")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                Session(environ=env, exit_hooks=False).end("error", "boom")
        lines = support.stdout_lines(out.getvalue())
        self.assertEqual([line["ev"] for line in lines], ["start", "end"])


class TimedLoaderCopies(unittest.TestCase):
    def test_copy_of_a_wrapped_loader_keeps_its_attributes(self):
        import copy
        from saturate_client import TimedLoader

        class Loader(list):
            batch_size = 4

        wrapped = copy.copy(TimedLoader(Loader([1]), lambda seconds: None))
        self.assertEqual((wrapped.batch_size, len(wrapped)), (4, 1))


class InactiveSession(unittest.TestCase):
    def test_without_protocol_nothing_is_read_or_written(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            s = Session(environ={"SATURATE_BATCH_SIZE": "abc"})
            loader = [1, 2]
            self.assertIs(s.wrap_loader(loader), loader)
            s.start(applied={"batch_size": 1})
            s.step(samples=1)
            s.end()
        self.assertEqual((out.getvalue(), s.settings, s.get("batch_size", 5)), ("", {}, 5))
        self.assertFalse(s.should_stop())

    def test_malformed_setting_fails_when_active(self):
        with self.assertRaisesRegex(SettingsError, "SATURATE_BATCH_SIZE='abc'"):
            Session(environ={"SATURATE_PROTOCOL": "1", "SATURATE_BATCH_SIZE": "abc"})


class CountSamples(unittest.TestCase):
    class Tensor:
        def __init__(self, *shape):
            self.shape = shape

        def dim(self):
            return len(self.shape)

    def test_first_tensor_inside_batches(self):
        t = self.Tensor
        self.assertEqual(count_samples(t(16, 3)), 16)
        self.assertEqual(count_samples((t(8, 2), t(8))), 8)
        self.assertEqual(count_samples({"ids": ["a"], "input": t(4, 9)}), 4)
        self.assertEqual(count_samples([{"x": t(2)}]), 2)
        self.assertIsNone(count_samples(["text", 3]))


class _FakeCuda:
    """torch.cuda as the session sees it on a GPU machine: 8 GiB, CUDA in use once `ready`."""

    def __init__(self):
        self.ready = False
        self.fractions = []

    def is_initialized(self):
        return self.ready

    def current_device(self):
        return 0

    def get_device_properties(self, device):
        return types.SimpleNamespace(total_memory=8 << 30)

    def set_per_process_memory_fraction(self, fraction, device):
        self.fractions.append((fraction, device))

    def synchronize(self):
        pass

    def max_memory_allocated(self):
        return 0

    def reset_peak_memory_stats(self):
        pass


class DeviceMemoryLimit(unittest.TestCase):
    def test_limit_is_applied_once_cuda_is_in_use(self):
        cuda = _FakeCuda()
        fake = types.SimpleNamespace(cuda=cuda, is_grad_enabled=lambda: True)
        saved = sys.modules.get("torch")
        sys.modules["torch"] = fake
        try:
            with support.TempRunDir() as run:
                env = run.env(SATURATE_DEVICE_MEMORY_LIMIT_BYTES=str(2 << 30))
                s = Session(environ=env, exit_hooks=False)
                s.step(samples=8)  # CUDA not in use yet: nothing to cap, nothing initialised
                self.assertEqual(cuda.fractions, [])
                cuda.ready = True
                s.step(samples=8)
                s.step(samples=8)
        finally:
            if saved is None:
                sys.modules.pop("torch", None)
            else:
                sys.modules["torch"] = saved
        self.assertEqual(cuda.fractions, [(0.25, 0)])  # 2 GiB of 8, once

    def test_malformed_limit_fails_when_active(self):
        with support.TempRunDir() as run:
            with self.assertRaises(SettingsError):
                Session(environ=run.env(SATURATE_DEVICE_MEMORY_LIMIT_BYTES="2GiB"),
                        exit_hooks=False)


if __name__ == "__main__":
    unittest.main()
