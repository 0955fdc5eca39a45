"""A third executor's secret stays out of reprs and shown config (issue 20 item 4): a repr
has no `Executors` value to ask which of its flags are secret, so it hides more."""

from __future__ import annotations

import msgspec

from exedra_engine import (
    BUILTIN_EXECUTORS,
    CPU,
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    ModelSpec,
    Override,
    plan_launch,
)
from exedra_engine._core.config.overrides import redact_config
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.secrets import REDACTED, redact_shown

TOKEN = "sdtok-0123456789"
ROWS = (
    (("-h", "--help"), (), 0, ()),
    (("-l", "--listen-ip"), (), 1, ()),
    (("--listen-port",), (), 1, ()),
    (("-m", "--model"), (), 1, ()),
    (("--steps",), (), 1, ()),
    (("--sd-token",), (), 1, ()),
    (("--sd-auth",), (), 1, ()),
)
SD = ExecutorProfile(
    kind="sd",
    binary="sd-server",
    flag_rows=ROWS,
    host_flag="--listen-ip",
    port_flag="--listen-port",
    ready_path="/health",
    secret_flags=frozenset({"--sd-token", "--sd-auth"}),
    capabilities={"image": ()},
    architectures=frozenset({"sd"}),
)
WITH_SD = BUILTIN_EXECUTORS.with_(SD)
HW = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind="sd", path="/opt/sd/sd-server"),))
SPEC = ModelSpec(id="flux", path="/m/flux.gguf", kind="sd", capabilities=("image",))


def test_a_third_executors_secret_flag_is_hidden_in_the_plans_repr() -> None:
    for given in (("--sd-token", TOKEN), (f"--sd-token={TOKEN}",), ("--sd-auth", TOKEN)):
        c = Constraints(port=7860, extra_args=(*given, "--steps", "8"))
        plan = plan_launch(SPEC, HW, c, executors=WITH_SD).unwrap()
        assert TOKEN in plan.args or f"--sd-token={TOKEN}" in plan.args  # the plan runs it
        assert TOKEN not in repr(plan), given
        assert TOKEN not in repr(c), given  # no kind there: an unknown flag's value hides
    # a plan for a kind the built-in set does not know shows no value at all
    plan = plan_launch(
        SPEC, HW, Constraints(port=7860, extra_args=("--sd-auth", TOKEN)), executors=WITH_SD
    ).unwrap()
    assert f"'--sd-auth', '{REDACTED}'" in repr(plan)


def test_a_repr_hides_by_name_and_every_copy_of_the_key() -> None:
    args, env = redact_shown(
        ("--sd-token", TOKEN, "--alias", TOKEN, "--x=" + TOKEN, "--api-key-file", "/k"),
        ("SD_TOKEN=" + TOKEN, "OTHER=" + TOKEN, "COPY=sk-key", "TZ=UTC"),
        api_key="sk-key",
    )
    assert TOKEN not in repr((args, env)) and "sk-key" not in repr(env)
    assert args[:4] == ("--sd-token", REDACTED, "--alias", REDACTED)
    assert args[4] == f"--x={REDACTED}"
    assert env[-1] == "TZ=UTC"  # what no secret names or equals is kept
    # the built-in key flags are hidden as before, copies of the plan's key anywhere
    c = Constraints(api_key="sk-abcdefgh", extra_env=("MIRROR=sk-abcdefgh",))
    assert "sk-abcdefgh" not in repr(c)


def test_constraints_repr_hides_its_overrides_secrets() -> None:
    cfg = Config(
        env={"HF_TOKEN": "hf-0123456789"},
        models={"flux": Override(args=("--sd-token", TOKEN), env={"MIRROR": TOKEN})},
    )
    text = repr(Constraints(overrides=cfg))
    assert TOKEN not in text and "hf-0123456789" not in text


def test_redact_config_takes_the_executors() -> None:
    cfg = Config(
        engines={"sd": Override(args=("--sd-auth", TOKEN, "--steps", "8"))},
        models={"flux": Override(env={"MIRROR": TOKEN})},
    )
    shown = redact_config(cfg, executors=WITH_SD)
    text = msgspec.json.encode(shown).decode()
    assert TOKEN not in text
    assert shown.engines["sd"].args == ("--sd-auth", REDACTED, "--steps", "8")
    # without them, a secret-reading name and an unknown flag's value are still hidden
    for args in ((f"--sd-token={TOKEN}",), ("--sd-auth", TOKEN, "--port", "8")):
        named = Config(engines={"llama": Override(args=args)})
        assert TOKEN not in msgspec.json.encode(redact_config(named)).decode()
    shown = redact_config(
        Config(engines={"llama": Override(args=("--sd-auth", TOKEN, "--port", "8"))})
    )
    assert shown.engines["llama"].args == ("--sd-auth", REDACTED, "--port", "8")


def test_spec_override_and_config_reprs_hide_secrets() -> None:
    spec = ModelSpec(path="/m/q.gguf", kind="llama", run_args=("--api-key", TOKEN, "-c", "8"))
    assert TOKEN not in repr(spec) and "'-c', '8'" in repr(spec)
    assert TOKEN not in repr(msgspec.structs.replace(SPEC, run_args=("--sd-auth", TOKEN)))
    o = Override(args=("--sd-token", TOKEN, "--steps", "8"), env={"MIRROR": TOKEN, "TZ": "UTC"})
    assert TOKEN not in repr(o) and "'TZ': 'UTC'" in repr(o)
    cfg = Config(
        env={"HF_TOKEN": "hf-0123456789"},
        models={"q": Override(env={"COPY": "hf-0123456789"})},
    )
    assert "hf-0123456789" not in repr(cfg)
    # an exception's text built from the values shows no secret either
    assert TOKEN not in str(ValueError(spec, o, Constraints(extra_args=("--sd-token", TOKEN))))
