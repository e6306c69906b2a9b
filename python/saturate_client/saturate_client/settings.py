# SPDX-License-Identifier: Apache-2.0
"""The settings saturate passes in SATURATE_* environment variables, parsed into typed values.

An absent or empty variable means "keep the program's own value": it is simply not in the dict.
A malformed one raises SettingsError naming the variable, the value and what was expected.
"""

PROTOCOL_VERSION = 1
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


class SettingsError(ValueError):
    """A SATURATE_* (or RANK/WORLD_SIZE) variable holds a value the protocol does not allow."""


def _whole_number(minimum):
    def parse(variable, text):
        try:
            value = int(text, 10)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise SettingsError(
                f"saturate: {variable}={text!r} is not a whole number >= {minimum}; saturate "
                f"sets it (protocol {PROTOCOL_VERSION}); unset it to keep the program's own value")
        return value
    return parse


def _precision(variable, text):
    if text not in PRECISIONS:
        raise SettingsError(f"saturate: {variable}={text!r} is not a precision; expected one of "
                            f"{'|'.join(PRECISIONS)}")
    return text


def _flag(variable, text):
    if text not in ("0", "1"):
        raise SettingsError(f"saturate: {variable}={text!r} is not a flag; expected 0 or 1")
    return text == "1"


# name in Session.settings -> (environment variable, parser). The order is the protocol's.
SETTINGS = {
    "batch_size": ("SATURATE_BATCH_SIZE", _whole_number(1)),
    "grad_accum": ("SATURATE_GRAD_ACCUM", _whole_number(1)),
    "precision": ("SATURATE_PRECISION", _precision),
    "num_workers": ("SATURATE_NUM_WORKERS", _whole_number(0)),
    "prefetch": ("SATURATE_PREFETCH", _whole_number(1)),
    "pin_memory": ("SATURATE_PIN_MEMORY", _flag),
    "max_steps": ("SATURATE_MAX_STEPS", _whole_number(0)),
    "seed": ("SATURATE_SEED", _whole_number(0)),
}

# Settings the program is not expected to report as applied (the session enforces them itself).
NOT_REPORTED = ("max_steps",)


def read_protocol(environ):
    """The protocol version in SATURATE_PROTOCOL, or None when saturate did not start this program.

    Raises SettingsError for a version this client does not speak.
    """
    text = environ.get("SATURATE_PROTOCOL", "")
    if text == "":
        return None
    if text != str(PROTOCOL_VERSION):
        raise SettingsError(f"saturate: SATURATE_PROTOCOL={text!r} is not supported; this "
                            f"saturate_client speaks protocol {PROTOCOL_VERSION} (upgrade it)")
    return PROTOCOL_VERSION


def read_settings(environ):
    """The settings present in `environ`, typed: {"batch_size": 96, "pin_memory": True, ...}."""
    settings = {}
    for name, (variable, parse) in SETTINGS.items():
        text = environ.get(variable, "").strip()
        if text != "":
            settings[name] = parse(variable, text)
    return settings


def read_flag(environ, variable):
    """An optional 0|1 variable (absent or empty is False)."""
    text = environ.get(variable, "").strip()
    return False if text == "" else _flag(variable, text)


def read_count(environ, variable, default, minimum):
    """An optional whole-number variable such as RANK or WORLD_SIZE (absent or empty: default)."""
    text = environ.get(variable, "").strip()
    return default if text == "" else _whole_number(minimum)(variable, text)
