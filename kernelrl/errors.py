"""Errors a user can cause (bad input, bad config). The CLI prints them as one line and exits 2."""


class KernelRLError(Exception):
    """Base class for user-facing errors: the message is the whole story, no traceback is shown."""


class ConfigError(KernelRLError):
    """A setting, recipe value or CLI option is invalid; the message names the field."""


class TaskFormatError(KernelRLError):
    """A task file is not in KernelBench format (no Model, get_inputs or get_init_inputs, or broken)."""


class StoreError(KernelRLError):
    """The exemplar store cannot be reached or is not at the expected schema version."""


class CheckpointError(KernelRLError):
    """A checkpoint is missing, incomplete (no manifest) or corrupt (checksum mismatch)."""
