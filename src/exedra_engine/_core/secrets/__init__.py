"""The secret walker: one table-driven place decides what is secret, and every output asks
it. Pure.

- `table`: the rules as data (key flags and their mistyped neighbours, secret words of
  variable names, URL credentials, key shapes, executors' key log lines);
- `judge`: each rule as a question (`is_secret_name`, `is_secret_flag`, `looks_secret`);
- `walk`: a plan's argv and env walked for its secrets (`plan_secrets`, `secret_copies`,
  `refuse_redacted`);
- `hide`: hiding found secrets in a value (`Hider`) or free text (`TextRedactor`);
- `shown`: plans, provenance, override files and reprs as they may be shown.

Plan rendering (text and ``--json``), ``--explain``, ``config``, the values' reprs (and
their ``__rich_repr__``), the log relay, the emit guard and the CLI's error echo all use it.
"""

from __future__ import annotations

from exedra_engine._core.secrets.hide import (
    Hider,
    TextRedactor,
    copied_secret,
    redact_bytes,
    redact_text,
)
from exedra_engine._core.secrets.judge import (
    is_secret_flag,
    is_secret_name,
    looks_secret,
    reads_as_secret,
)
from exedra_engine._core.secrets.shown import (
    ENGINE_LAYER,
    config_secrets,
    redact_args,
    redact_config,
    redact_env,
    redact_plan,
    redact_provenance,
    redact_said,
    redact_shown,
)
from exedra_engine._core.secrets.table import REDACTED, SHORT_KEY
from exedra_engine._core.secrets.walk import (
    plan_secrets,
    redaction_markers,
    refuse_redacted,
    secret_copies,
)

__all__ = (
    "ENGINE_LAYER",
    "REDACTED",
    "SHORT_KEY",
    "Hider",
    "TextRedactor",
    "config_secrets",
    "copied_secret",
    "is_secret_flag",
    "is_secret_name",
    "looks_secret",
    "plan_secrets",
    "reads_as_secret",
    "redact_args",
    "redact_bytes",
    "redact_config",
    "redact_env",
    "redact_plan",
    "redact_provenance",
    "redact_said",
    "redact_shown",
    "redact_text",
    "redaction_markers",
    "refuse_redacted",
    "secret_copies",
)
