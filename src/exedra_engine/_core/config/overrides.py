"""Override files as values: `Override` (one layer of args and env) and `Config` (the
layers by executor kind and model id), and the files as they may be shown (`redact_config`):
every secret the walker finds hidden where it stands, and a key's value wherever the files
copy it. Pure."""

from __future__ import annotations

from typing import Any

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.kinds import KindName
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets import Hider, plan_secrets, redact_shown, secret_values_shown
from exedra_engine._core.struct import EMPTY, Value, frozen_fields


class Override(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One launch customization layer."""

    args: tuple[str, ...] = ()
    env: dict[str, str] = EMPTY
    """A `FrozenDict`, whatever was given: the layer stays as built, and hashable."""

    def __post_init__(self) -> None:
        frozen_fields(self, "env")

    def shown_fields(self) -> dict[str, Any]:
        args, env = redact_shown(self.args, [f"{n}={v}" for n, v in self.env.items()])
        return {"args": args, "env": dict(e.split("=", 1) for e in env)}

    def __repr__(self) -> str:
        return self.shown_repr()


class Config(Value, frozen=True, kw_only=True, omit_defaults=True):
    """Launch overrides, lowest priority first: env for every executor, engines by executor
    kind, models by model id. Args are executor-specific, so there is no global args layer."""

    env: dict[str, str] = EMPTY
    engines: dict[KindName, Override] = EMPTY
    models: dict[str, Override] = EMPTY

    def __post_init__(self) -> None:
        # Deeply frozen, so a config can key a cache and no caller can edit a shared one.
        frozen_fields(self, "env", "engines", "models")

    def shown_fields(self) -> dict[str, Any]:
        # Secrets and their copies across the files hidden (`redact_config`), and each
        # `Override` hides again by its own repr.
        c = redact_config(self)
        return {"env": dict(c.env), "engines": dict(c.engines), "models": dict(c.models)}

    def __repr__(self) -> str:
        return self.shown_repr()


def redact_config(cfg: Config, *, executors: Executors = BUILTIN) -> Config:
    """Override files as they may be shown: secret variables and key flags hidden, and a
    key's value wherever the files copy it (after a mistyped ``--api-kee``, in another
    variable, inside a longer value), as `redact_plan` hides it in a plan. The key flags are
    those of `executors` (the ones the files were read with) and any flag whose name reads
    as a secret (``--sd-token``): an override file may name an executor the caller added."""
    hide = Hider(config_secrets(cfg, executors=executors))

    def env(m: dict[str, str]) -> dict[str, str]:
        return {n: hide.env(f"{n}={v}").partition("=")[2] for n, v in m.items()}

    def over(o: Override) -> Override:
        shown, _ = redact_shown(o.args, executors=executors)
        return msgspec.structs.replace(o, args=tuple(hide.token(t) for t in shown), env=env(o.env))

    return msgspec.structs.replace(
        cfg,
        env=env(cfg.env),
        engines={k: over(o) for k, o in cfg.engines.items()},
        models={k: over(o) for k, o in cfg.models.items()},
    )


def config_secrets(cfg: Config, *, executors: Executors = BUILTIN) -> frozenset[str]:
    """Every secret override files hold where it stands (as `redact_config` finds them):
    what text quoting the files (``config --check``'s findings) must not show."""
    overrides = [*cfg.engines.values(), *cfg.models.values()]
    secrets = {v for o in overrides for v in _override_secrets(o, cfg.env, executors)}
    secrets.update(plan_secrets((), [f"{n}={x}" for n, x in cfg.env.items()]))
    return frozenset(secrets)


def _override_secrets(o: Override, env: dict[str, str], executors: Executors) -> list[str]:
    variables = [f"{n}={x}" for n, x in (*env.items(), *o.env.items())]
    return [
        *plan_secrets(o.args, variables, executors=executors),
        *(v for _, v, _ in secret_values_shown(o.args, executors)),
    ]
