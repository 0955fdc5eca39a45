"""The secret walker: one table-driven place decides what is secret, and every output asks
it. Pure, and over strings only: it knows no plan, provenance or override file.

- `table`: the rules as data (key flags and their mistyped neighbours, secret words of
  variable names, URL credentials, key shapes, executors' key log lines);
- `judge`: each rule as a question (`is_secret_name`, `is_secret_flag`, `looks_secret`);
- `walk`: argv and env walked for their secrets (`plan_secrets`, `secret_copies`,
  `redaction_markers`);
- `hide`: hiding found secrets in a value (`Hider`) or free text (`TextRedactor`);
- `shown`: argv, env and a layer's tokens as they may be shown.

The typed views stand beside their types and ask it: a plan and its explanation
(`exedra_engine._core.plan.explained`), provenance (`exedra_engine._core.plan.provenance`),
override files (`exedra_engine._core.config.overrides`), findings
(`exedra_engine._core.config.findings`), the launch refusal of a redacted plan
(`exedra_engine._core.launch.redacted`). Plan rendering (text and ``--json``), ``--explain``,
``config``, the values' reprs (and their ``__rich_repr__``), the log relay, the emit guard and
the CLI's error echo all use it.
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
    redact_args,
    redact_env,
    redact_shown,
    said_tokens_shown,
)
from exedra_engine._core.secrets.table import REDACTED, SHORT_KEY
from exedra_engine._core.secrets.walk import (
    plan_secrets,
    redaction_markers,
    secret_copies,
    secret_values_shown,
)

__all__ = (
    "ENGINE_LAYER",
    "REDACTED",
    "SHORT_KEY",
    "Hider",
    "TextRedactor",
    "copied_secret",
    "is_secret_flag",
    "is_secret_name",
    "looks_secret",
    "plan_secrets",
    "reads_as_secret",
    "redact_args",
    "redact_bytes",
    "redact_env",
    "redact_shown",
    "redact_text",
    "redaction_markers",
    "said_tokens_shown",
    "secret_copies",
    "secret_values_shown",
)
